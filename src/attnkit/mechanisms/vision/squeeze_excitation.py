"""Squeeze-and-Excitation channel attention (Hu et al., 2018, "Squeeze-and-Excitation Networks").

Each channel of a feature map is one feature vector (its ``h x w`` responses); the block weighs
every channel by a gate computed from all channels' global statistics:

    z_c = 1 / (h w) Σ_{i,j} u_c(i, j)              squeeze: global average pooling   (eq. 2)
    s   = σ(W_2 δ(W_1 z))                          excitation, δ = ReLU, σ = sigmoid (eq. 3)
    x̃_c = s_c · u_c                                 scale                           (eq. 4)

with ``W_1 [C/r, C]`` and ``W_2 [C, C/r]`` (the paper omits their biases "to simplify notation";
its networks have them, as here). The gates are independent sigmoids, not a softmax over channels:
several channels can be fully on at once, which the paper chose on purpose ("multiple channels
are allowed to be emphasised"). In the survey's taxonomy the query is the features themselves
(self-attentive); a sigmoid gate is none of the survey's alignment functions, so that cell of its
row stays empty.
"""

from __future__ import annotations

from torch import Tensor, nn

from attnkit.mechanisms.vision._checks import check_feature_map, check_positive


class SqueezeExcitation(nn.Module):
    """Squeeze-and-Excitation channel attention: ``x̃_c = σ(W_2 δ(W_1 z))_c · u_c`` (eq. 2-4).

    Args:
        channels: ``C``.
        reduction: ``r``: the bottleneck has ``max(1, C // r)`` units (paper default 16).

    Shapes: ``u [B, C, h, w]`` → ``x̃ [B, C, h, w]``; :meth:`gates` gives ``s [B, C]``.

    Example::

        >>> import torch
        >>> from attnkit.mechanisms.vision import SqueezeExcitation
        >>> se = SqueezeExcitation(32, reduction=8)
        >>> se(torch.randn(2, 32, 5, 7)).shape
        torch.Size([2, 32, 5, 7])
    """

    taxonomy = {"query_type": "Self-Attentive"}

    def __init__(self, channels: int, reduction: int = 16) -> None:
        super().__init__()
        check_positive("SqueezeExcitation", channels=channels, reduction=reduction)
        self.channels = channels
        hidden = max(1, channels // reduction)
        self.reduce = nn.Linear(channels, hidden)  # W_1, eq. (3)
        self.expand = nn.Linear(hidden, channels)  # W_2, eq. (3)

    def gates(self, u: Tensor) -> Tensor:
        """The excitation ``s = σ(W_2 δ(W_1 z)) [B, C]`` of ``u [B, C, h, w]`` (eq. 2-3)."""
        check_feature_map("SqueezeExcitation", u, self.channels)
        z = u.mean(dim=(2, 3))  # squeeze, eq. (2): [B, C]
        return self.expand(self.reduce(z).relu()).sigmoid()

    def forward(self, u: Tensor) -> Tensor:
        """``x̃ = s ⊙ u``, each channel scaled by its gate (eq. 4).

        Args:
            u: the feature map ``[B, C, h, w]``.

        Returns:
            ``x̃ [B, C, h, w]``.
        """
        return u * self.gates(u)[:, :, None, None]
