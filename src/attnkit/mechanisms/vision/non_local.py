"""The non-local block (Wang et al., 2018, "Non-local Neural Networks"): every position attends all.

The generic non-local operation and its residual block are

    y_i = 1 / C(x) Σ_j f(x_i, x_j) g(x_j)                                               (eq. 1)
    z_i = W_z y_i + x_i                                                                  (eq. 6)

with ``g(x_j) = W_g x_j`` a 1 x 1 convolution to ``C' = C/2`` channels and ``W_z`` a 1 x 1
convolution back to ``C``. The pairwise function ``f`` and the normaliser ``C(x)`` give the
paper's instantiations (§3.2):

- ``"gaussian"``: ``f = exp(x_i^T x_j)``, ``C(x) = Σ_j f`` — a softmax over positions (eq. 2);
- ``"embedded_gaussian"``: ``f = exp(θ(x_i)^T φ(x_j))`` with ``θ = W_θ x``, ``φ = W_φ x``, and
  ``C(x) = Σ_j f``: ``y = softmax(x^T W_θ^T W_φ x) g(x)``, self-attention (eq. 3);
- ``"dot_product"``: ``f = θ(x_i)^T φ(x_j)``, ``C(x) = N`` (eq. 4) — no softmax;
- ``"concatenation"``: ``f = ReLU(w_f^T [θ(x_i); φ(x_j)])``, ``C(x) = N`` (eq. 5).

``N`` is the number of positions ``j`` summed over (``h w``, or the pooled count with
``subsample``). The two softmax forms run through :func:`attnkit.attention` with the dot score
over the ``h w`` positions (so ``attnkit.interpret.record`` sees their weights); the two
``C(x) = N`` forms are plain sums. The paper's implementation tricks (§3.3) are options: a batch
norm after ``W_z`` whose scale starts at zero, so the block starts as the identity and can be
inserted into a pre-trained network; and a 2 x 2 max pool after ``φ`` and ``g`` ("subsampling"),
which quarters the pairwise computation.

Memory: ``[B, h w, N]`` scores for the softmax forms (the engine may tile them) and for
``"concatenation"``; ``"dot_product"`` computes ``θ (φ^T g) / N`` in that order (exact by
associativity), ``O(h w C'^2)`` without any ``[h w, N]`` matrix.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.core.engine import attention
from attnkit.mechanisms.vision._checks import check_feature_map, check_positive

Pairwise = Literal["gaussian", "embedded_gaussian", "dot_product", "concatenation"]
_PAIRWISE = ("gaussian", "embedded_gaussian", "dot_product", "concatenation")
# The survey's words for each form's score and alignment (the C(x) = N forms are no softmax).
_TAXONOMY = {
    "gaussian": {"scoring": "Multiplicative", "alignment": "Global"},
    "embedded_gaussian": {"scoring": "Multiplicative", "alignment": "Global"},
    "dot_product": {"scoring": "Multiplicative"},
    "concatenation": {"scoring": "Additive"},
}


def _positions(x: Tensor) -> Tensor:
    """``[B, C, h, w]`` → one row per position ``[B, h w, C]``."""
    return x.flatten(2).transpose(1, 2)


class NonLocalBlock(nn.Module):
    """Non-local block: ``z_i = W_z (1/C(x) Σ_j f(x_i, x_j) g(x_j)) + x_i`` (Wang et al., eq. 1, 6).

    Args:
        channels: ``C``.
        inter_channels: ``C'`` of ``θ``, ``φ``, ``g`` (default ``max(1, C // 2)``, the paper's).
        pairwise: ``"embedded_gaussian"`` (default), ``"gaussian"``, ``"dot_product"`` or
            ``"concatenation"`` (eq. 2-5).
        subsample: 2 x 2 max pooling after ``φ`` and ``g`` (needs ``h, w >= 2``; §3.3).
        batch_norm: a batch norm after ``W_z`` with its scale initialised to zero, so the block
            starts as the identity (§3.3/§4.1); ``False``: ``W_z`` alone (PyTorch's default init).

    Shapes: ``x [B, C, h, w]`` → ``z [B, C, h, w]``.

    Example::

        >>> import torch
        >>> from attnkit.mechanisms.vision import NonLocalBlock
        >>> block = NonLocalBlock(16, pairwise="concatenation", subsample=True)
        >>> block(torch.randn(2, 16, 6, 8)).shape
        torch.Size([2, 16, 6, 8])
    """

    def __init__(
        self,
        channels: int,
        inter_channels: int | None = None,
        pairwise: Pairwise = "embedded_gaussian",
        subsample: bool = False,
        batch_norm: bool = True,
    ) -> None:
        super().__init__()
        inter_channels = inter_channels or max(1, channels // 2)
        check_positive("NonLocalBlock", channels=channels, inter_channels=inter_channels)
        if pairwise not in _PAIRWISE:
            raise ValueError(
                f"NonLocalBlock: pairwise must be one of {', '.join(map(repr, _PAIRWISE))}, "
                f"got {pairwise!r}"
            )
        self.channels, self.inter_channels = channels, inter_channels
        self.pairwise, self.subsample = pairwise, subsample
        self.taxonomy = {"query_type": "Self-Attentive", **_TAXONOMY[pairwise]}
        self.g = nn.Conv2d(channels, inter_channels, 1)
        self.theta: nn.Conv2d | None = None
        self.phi: nn.Conv2d | None = None
        if pairwise != "gaussian":  # the Gaussian compares x_i and x_j themselves (eq. 2)
            self.theta = nn.Conv2d(channels, inter_channels, 1)
            self.phi = nn.Conv2d(channels, inter_channels, 1)
        # w_f of eq. (5): one weight per channel of [θ(x_i); φ(x_j)]
        self.concat_weight = (
            nn.Parameter(torch.randn(2 * inter_channels) / (2 * inter_channels) ** 0.5)
            if pairwise == "concatenation"
            else None
        )
        self.output = nn.Conv2d(inter_channels, channels, 1)  # W_z, eq. (6)
        self.norm = nn.BatchNorm2d(channels) if batch_norm else None
        if self.norm is not None:
            nn.init.zeros_(self.norm.weight)  # z = x at initialisation

    def _embed(self, conv: nn.Conv2d | None, x: Tensor, pool: bool) -> Tensor:
        out = x if conv is None else conv(x)
        if pool and self.subsample:
            out = F.max_pool2d(out, 2)
        return _positions(out)

    def non_local(self, x: Tensor) -> Tensor:
        """``y = 1/C(x) Σ_j f(x_i, x_j) g(x_j)`` (eq. 1): ``[B, C', h, w]``."""
        check_feature_map("NonLocalBlock", x, self.channels, 2 if self.subsample else 1)
        b, _, h, w = x.shape
        query = self._embed(self.theta, x, pool=False)  # θ(x_i): [B, h w, C'] (C for gaussian)
        key = self._embed(self.phi, x, pool=True)  # φ(x_j): [B, N, C']
        value = self._embed(self.g, x, pool=True)  # g(x_j): [B, N, C']
        n = key.shape[1]
        if self.pairwise in ("gaussian", "embedded_gaussian"):
            # exp(θ_i^T φ_j) / Σ_j exp(θ_i^T φ_j) is the softmax of dot scores, unscaled (eq. 2-3)
            y = attention(query, key, value, score="dot").context
        elif self.pairwise == "dot_product":
            y = query @ (key.transpose(1, 2) @ value) / n  # (θ φ^T) g / N, associated (eq. 4)
        else:
            assert self.concat_weight is not None
            w_theta, w_phi = self.concat_weight.split(self.inter_channels)
            # w_f^T [θ_i; φ_j] = w_θ^T θ_i + w_φ^T φ_j: no [h w, N, 2C'] concatenation needed
            f = (
                (query @ w_theta.to(query.dtype))[:, :, None]
                + (key @ w_phi.to(key.dtype))[:, None, :]
            ).relu()  # [B, h w, N], eq. (5)
            y = f @ value / n
        return y.transpose(1, 2).reshape(b, self.inter_channels, h, w)

    def forward(self, x: Tensor) -> Tensor:
        """``z = W_z y + x`` (eq. 6), with the batch norm after ``W_z`` if enabled.

        Args:
            x: the feature map ``[B, C, h, w]``.

        Returns:
            ``z [B, C, h, w]``.
        """
        wy = self.output(self.non_local(x))
        if self.norm is not None:
            wy = self.norm(wy)
        return wy + x
