"""Vision Transformer (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words").

An image ``x [B, C, h, w]`` is cut into ``N = (H / P) · (W / P)`` non-overlapping patches of
``P × P`` pixels, each flattened to ``x_p^i [P² · C]`` (row-major over the patch grid; inside a
patch, row-major over pixels, channels last). ViT's eq. (1)-(4):

    z_0 = [x_class; x_p^1 E; …; x_p^N E] + E_pos        E [P²·C, D], E_pos [N + 1, D]   (1)
    z'_l = MSA(LN(z_{l-1})) + z_{l-1}                    l = 1 … L                       (2)
    z_l = MLP(LN(z'_l)) + z'_l                                                           (3)
    y = LN(z_L^0)                                         the class token's output         (4)

and the classifier is a linear layer on ``y``. Each layer is
:class:`attnkit.layers.TransformerEncoderLayer` with ``norm_first=True`` (the pre-norm of eq. 2-3)
and a GELU MLP, so its multi-head self-attention (survey §3.3: "Self-Attentive", "Multi-Head")
goes through attnkit's engine, where ``attnkit.interpret.record`` sees its weights and
``attnkit.evaluate.ablate`` can replace them.

Taxonomy: the attention is self-attention over patches (§3.1.1, "Self-Attentive" queries), and
the stack of layers refines the class token's query layer after layer ("Multi-Hop", §3.3.2).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnkit.layers import TransformerEncoderLayer
from attnkit.layers.transformer import kind_attention


def patchify(images: Tensor, patch_size: int) -> Tensor:
    """Non-overlapping ``P × P`` patches, flattened: ``[B, C, h, w]`` → ``[B, N, P·P·C]``.

    Patch ``i`` is the ``i``-th of the grid in row-major order; its vector lists the patch's
    pixels row by row, the channels of each pixel together (ViT's ``x_p``).
    """
    if images.dim() != 4:
        raise ValueError(f"images must be [B, C, h, w], got {tuple(images.shape)}")
    b, c, h, w = images.shape
    p = patch_size
    if h % p or w % p:
        raise ValueError(f"patch_size {p} must divide the image size, got {h} × {w}")
    x = images.reshape(b, c, h // p, p, w // p, p)  # [B, C, gh, P, gw, P]
    x = x.permute(0, 2, 4, 3, 5, 1)  # [B, gh, gw, P, P, C]
    return x.reshape(b, (h // p) * (w // p), p * p * c)


class VisionTransformer(nn.Module):
    """ViT classifier: patch embedding, class token, learned positions, pre-norm encoder layers.

    Args:
        image_size: ``(H, W)`` of the inputs.
        channels: ``C``.
        patch_size: ``P``; divides ``H`` and ``W``.
        num_classes: outputs of the classifier.
        d_model: ``D``.
        nhead: heads of each self-attention; divides ``D``.
        num_layers: ``L``.
        dim_feedforward: hidden size of each MLP block.
        dropout: on the embeddings, attention weights and MLP/residual branches (ViT's).
        attention: the self-attention's kind: ``"exact"`` or an efficient kind
            (``attnkit.efficient``, e.g. ``"linear"``); efficient kinds run without
            attention-weight dropout and form no weights, so attention rollout and the
            weight-replacing ablations need ``"exact"``.

    Shapes: ``forward(images [B, C, h, w]) -> logits [B, num_classes]``.

    Example::

        >>> vit = VisionTransformer((28, 28), 1, 7, 10, d_model=32, nhead=4, num_layers=2)
        >>> vit(torch.randn(5, 1, 28, 28)).shape
        torch.Size([5, 10])
    """

    def __init__(
        self,
        image_size: tuple[int, int],
        channels: int,
        patch_size: int,
        num_classes: int,
        *,
        d_model: int = 64,
        nhead: int = 4,
        num_layers: int = 4,
        dim_feedforward: int = 128,
        dropout: float = 0.0,
        attention: str = "exact",
    ) -> None:
        super().__init__()
        h, w = image_size
        if h % patch_size or w % patch_size:
            raise ValueError(f"patch_size {patch_size} must divide the image size, got {h} × {w}")
        self.image_size, self.channels, self.patch_size = (h, w), channels, patch_size
        self.attention = attention
        self.grid = (h // patch_size, w // patch_size)
        n_patches = self.grid[0] * self.grid[1]
        self.patch_embedding = nn.Linear(patch_size * patch_size * channels, d_model)  # E
        self.class_token = nn.Parameter(torch.zeros(1, 1, d_model))  # x_class
        self.position_embedding = nn.Parameter(torch.zeros(1, n_patches + 1, d_model))  # E_pos
        nn.init.trunc_normal_(self.position_embedding, std=0.02)  # ViT's initialisation
        nn.init.trunc_normal_(self.class_token, std=0.02)
        self.embedding_dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            TransformerEncoderLayer(
                d_model,
                nhead,
                dim_feedforward,
                dropout,
                activation="gelu",
                batch_first=True,
                norm_first=True,
                attention=kind_attention(attention, d_model, nhead),
            )
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model)  # LN of eq. (4)
        self.head = nn.Linear(d_model, num_classes)

    def tokens(self, images: Tensor) -> Tensor:
        """``z_0`` of eq. (1): ``[B, N + 1, D]``, the class token first."""
        if images.dim() != 4 or tuple(images.shape[1:]) != (self.channels, *self.image_size):
            raise ValueError(
                f"images must be [B, {self.channels}, {self.image_size[0]}, "
                f"{self.image_size[1]}], got {tuple(images.shape)}"
            )
        patches = self.patch_embedding(patchify(images, self.patch_size))  # [B, N, D]
        cls = self.class_token.expand(len(images), -1, -1)  # [B, 1, D]
        return self.embedding_dropout(torch.cat([cls, patches], 1) + self.position_embedding)

    def forward(self, images: Tensor) -> Tensor:
        """Logits ``[B, num_classes]`` from the class token's final representation."""
        z = self.tokens(images)
        for layer in self.layers:
            z = layer(z)  # eq. (2)-(3)
        return self.head(self.norm(z[:, 0]))  # eq. (4) and the classifier
