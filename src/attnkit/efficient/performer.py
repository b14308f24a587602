"""Performer attention, FAVOR+ (Choromanski et al. 2021, "Rethinking Attention with Performers",
§2-3, Lemma 1): softmax attention estimated without bias by positive orthogonal random features.

With ``x`` scaled by ``scale^(1/2)`` (so ``exp(x_q·x_k) = exp(scale·q·k)``, the softmax kernel),

    φ(x) = exp(ω_r·x - |x|²/2) / sqrt(m),   r = 1 … m                          (Lemma 1, eq. 7)

gives ``E[φ(q)·φ(k)] = exp(q·k)`` for ``ω_r ~ N(0, I_d)``; drawing the ``ω_r`` in blocks of ``d``
exactly orthogonal rows, each rescaled to a ``χ_d``-distributed norm, keeps every marginal Gaussian
and lowers the variance (§2.4, Theorem 2). The features then go through the linear-attention
computation (:func:`attnkit.core.kernel.kernel_attention`, causal by prefix sums, §2.5).

Numerical stability: each query's features are divided by their row maximum (it cancels between
numerator and denominator); in non-causal attention the keys' by the maximum over all keys of a
head (also cancels; detached, as in the authors' code). Causal attention does not shift the keys,
so no later key influences an earlier output even by rounding; ``ω·x - |x|²/2 <= |ω|²/2``
bounds their exponent.

Generalized attention (§2.2 and §4.3 of the paper, "generalized attention"; performer-pytorch's
``generalized_attention=True, kernel_fn=nn.ReLU()``): ``kernel_fn=f`` replaces the softmax kernel's
features by ``φ(x) = f(ω x) + ε`` (``ε = kernel_epsilon``, 1e-3 as in performer-pytorch; the
paper's ``1/sqrt(m)`` cancels in the normalisation), so the attention is
``φ(Q)φ(K)^T V`` normalised by its row sums, a kernel other than ``exp(q·k)``; ReLU features were
the paper's best on proteins. ``f`` must give non-negative features; nothing is stabilised (no
exponential).

Feature redraw (§4.2 of the paper, "redrawing features"): :class:`PerformerAttention` keeps its
projection ``ω [m, d]`` as a buffer, redrawn by :meth:`~PerformerAttention.redraw_features` when the
training loop asks (and every ``redraw_interval`` training calls if given).
``ak.MultiHeadAttention(attention="performer")`` builds its own :class:`PerformerAttention` (the
features, drawn for its head size, are saved in its ``state_dict``); :func:`redraw_performer_features` redraws those of
every Performer inside a model, e.g. every few hundred training steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from attnkit.core.call import AttentionOutput
from attnkit.core.kernel import kernel_attention
from attnkit.core.kinds import KINDS
from attnkit.efficient._inputs import (
    EfficientCall,
    EfficientKind,
    KindOptions,
    check_call,
    check_positive_int,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

TAXONOMY: dict[str, str | list[str]] = {"scoring": "Scaled-Multiplicative", "alignment": "Global"}


def orthogonal_gaussian(
    num_features: int,
    dim: int,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """``ω [m, d]``: blocks of ``d`` orthonormal rows (QR of a Gaussian matrix), each row rescaled
    to the norm of an independent ``N(0, I_d)`` vector (Choromanski et al. §2.4).

    Args:
        num_features: ``m``, the random features (rows).
        dim: ``d``, the size of the queries and keys.
        generator: the random source (``None``: torch's global one).
        device: of the result.
        dtype: of the result.

    Returns:
        ``ω [m, d]``.

    Example::

        >>> omega = orthogonal_gaussian(20, 8, generator=torch.Generator().manual_seed(0))
        >>> block = omega[:8] / omega[:8].norm(dim=-1, keepdim=True)  # orthonormal rows
        >>> omega.shape, torch.allclose(block @ block.T, torch.eye(8), atol=1e-5)
        (torch.Size([20, 8]), True)"""
    num_features = check_positive_int("num_features", num_features)
    dim = check_positive_int("dim", dim)
    blocks = []
    for _ in range(math.ceil(num_features / dim)):
        gaussian = torch.randn(dim, dim, generator=generator, dtype=torch.float64)
        q, r = torch.linalg.qr(gaussian)
        q = q * torch.sign(torch.diagonal(r))  # the Haar-uniform orthogonal matrix
        blocks.append(q.T)
    rows = torch.cat(blocks)[:num_features]
    norms = torch.randn(num_features, dim, generator=generator, dtype=torch.float64).norm(dim=-1)
    return (rows * norms[:, None]).to(device=device, dtype=dtype)


def favor_features(
    x: Tensor, projection: Tensor, *, stabilise: str, keep: Tensor | None = None
) -> Tensor:
    """Positive random features ``φ(x) [..., L, m]`` of ``x [..., L, d]`` (already scaled).

    ``stabilise``: ``"row"`` divides each row by its maximum (queries), ``"all"`` by the maximum
    over the last two axes (non-causal keys; only the rows ``keep [..., L, 1]`` count, so a
    masked-out key cannot push the others' features to zero), ``"none"`` leaves them (causal keys).
    """
    # ``|x|²/2`` and the ``1/sqrt(m)`` factor are one shift per row, added (negated) in place to
    # the product before an in-place exp: two passes over the [..., L, m] features, and in the
    # backward only exp's and the shift's row sums (an in-place subtraction would negate the
    # whole gradient first; the product's backward needs only x and ω).
    log_root_m = 0.5 * math.log(projection.shape[0])
    half_norm = (x * x).sum(-1, keepdim=True) / 2  # [..., L, 1]
    logits = x @ projection.to(x.dtype).T  # [..., L, m]
    if stabilise == "row":
        # the row's maximum of ω·x - |x|²/2 is max(ω·x) - |x|²/2, detached as a whole
        top = logits.detach().amax(-1, keepdim=True) - half_norm.detach()
        return logits.add_(-(half_norm + top + log_root_m)).exp_()
    if stabilise == "all" and logits.shape[-2] > 0:
        logits = logits.add_(-half_norm)
        with torch.no_grad():
            counted = logits if keep is None else logits.masked_fill(~keep, float("-inf"))
            top = counted.amax((-1, -2), keepdim=True)
            top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        return logits.sub_(top + log_root_m).exp_()  # a constant: no gradient to reduce
    return logits.add_(-(half_norm + log_root_m)).exp_()


def generalized_features(
    x: Tensor, projection: Tensor, kernel_fn: Callable[[Tensor], Tensor], epsilon: float
) -> Tensor:
    """Generalized-attention features ``φ(x) = f(ω x) + ε [..., L, m]`` of ``x [..., L, d]``
    (already scaled), ``projection ω [m, d]``, ``f = kernel_fn``."""
    return kernel_fn(x @ projection.to(x.dtype).T) + epsilon


def _check_kernel(kernel_fn: object, kernel_epsilon: object) -> float:
    if kernel_fn is not None and not callable(kernel_fn):
        raise TypeError(
            f"kernel_fn must be a callable (e.g. torch.nn.ReLU()) or None, got "
            f"{type(kernel_fn).__name__}"
        )
    if isinstance(kernel_epsilon, bool) or not isinstance(kernel_epsilon, (int, float)):
        raise TypeError(f"kernel_epsilon must be a float, got {type(kernel_epsilon).__name__}")
    if not kernel_epsilon >= 0:
        raise ValueError(f"kernel_epsilon must be >= 0, got {kernel_epsilon}")
    return float(kernel_epsilon)


def _favor(
    call: EfficientCall,
    projection: Tensor,
    chunk: int,
    kernel_fn: Callable[[Tensor], Tensor] | None = None,
    kernel_epsilon: float = 1e-3,
) -> AttentionOutput:
    """FAVOR+ on a checked call with the random features ``projection [m, d]`` (generalized
    attention with ``kernel_fn``)."""
    d = call.q.shape[-1]
    if not isinstance(projection, Tensor) or projection.dim() != 2 or projection.shape[1] != d:
        given = tuple(projection.shape) if isinstance(projection, Tensor) else type(projection)
        raise ValueError(f"projection must be [num_features, d={d}], got {given}")
    root = math.sqrt(call.scale)
    key_mask = call.key_mask("performer")
    if kernel_fn is not None:
        phi_q = generalized_features(call.q * root, projection, kernel_fn, kernel_epsilon)
        phi_k = generalized_features(call.k * root, projection, kernel_fn, kernel_epsilon)
    else:
        phi_q = favor_features(call.q * root, projection, stabilise="row")
        keep = None if key_mask is None else key_mask.transpose(-1, -2)  # [B', H', N, 1]
        stabilise = "none" if call.causal else "all"
        phi_k = favor_features(call.k * root, projection, stabilise=stabilise, keep=keep)
    context = kernel_attention(
        phi_q, phi_k, call.v, causal=call.causal, key_mask=key_mask, chunk=chunk
    )
    return call.output(context)


def performer_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    projection: Tensor,
    chunk: int = 64,
    kernel_fn: Callable[[Tensor], Tensor] | None = None,
    kernel_epsilon: float = 1e-3,
    **options: Unpack[KindOptions],
) -> AttentionOutput:
    """FAVOR+ estimate of ``softmax(scale·q·k^T) v`` with the random features ``projection`` (or
    generalized attention with ``kernel_fn``).

    Args:
        q: ``[B, H, M, d]`` or ``[B, M, d]``.
        k: ``[B, H_kv, N, d]``.
        v: ``[B, H_kv, N, d_v]``.
        projection: ``ω [m, d]`` (e.g. :func:`orthogonal_gaussian`); more features, less error.
        chunk: positions per chunk of the causal prefix sums.
        kernel_fn: ``f`` of generalized attention, ``φ(x) = f(ω x) + ε`` (e.g.
            ``torch.nn.ReLU()``; non-negative); ``None``: the softmax kernel (FAVOR+).
        kernel_epsilon: ``ε`` of generalized attention.
        options: :class:`~attnkit.efficient._inputs.KindOptions` (key-padding masks only;
            causal by prefix sums, §2.5 of the paper).

    Returns:
        :class:`~attnkit.AttentionOutput` with ``context [B, H, M, d_v]``.

    Example::

        >>> omega = orthogonal_gaussian(256, 16, generator=torch.Generator().manual_seed(0))
        >>> x = torch.randn(1, 2, 1024, 16)
        >>> performer_attention(x, x, x, projection=omega, causal=True).context.shape
        torch.Size([1, 2, 1024, 16])
    """
    chunk = check_positive_int("chunk", chunk)
    epsilon = _check_kernel(kernel_fn, kernel_epsilon)
    call = check_call(PerformerAttention.name, q, k, v, **options)
    return _favor(call, projection, chunk, kernel_fn, epsilon)


@KINDS.register("performer")
class PerformerAttention(EfficientKind):
    """FAVOR+ attention with its random features kept as a buffer (redrawn on demand); the
    attention kind ``"performer"``.

    Args:
        head_dim: ``d``, the query/key size per head; ``None``: given by the
            :class:`~attnkit.MultiHeadAttention` that runs it (:meth:`bind`), which then draws
            the features.
        num_features: ``m`` random features (the paper uses ``m = d·log d`` as a default order).
        redraw_interval: in training mode, redraw the features every this many calls
            (``None``: only when :meth:`redraw_features` is called).
        chunk: positions per chunk of the causal prefix sums.
        generator: source of the initial features (default: torch's global RNG, so
            ``torch.manual_seed`` before building the model fixes them).
        kernel_fn: generalized attention's ``f`` (module doc; e.g. ``torch.nn.ReLU()``, kept
            as a submodule when it is a module); ``None``: FAVOR+'s softmax kernel.
        kernel_epsilon: generalized attention's ``ε``.

    Example::

        >>> mha = ak.MultiHeadAttention(64, 4, batch_first=True,
        ...                             attention=PerformerAttention(num_features=128))
        >>> relu = PerformerAttention(num_features=128, kernel_fn=torch.nn.ReLU())
    """

    name = "performer"
    taxonomy = TAXONOMY
    projection: Tensor | None

    def __init__(
        self,
        head_dim: int | None = None,
        num_features: int = 256,
        *,
        redraw_interval: int | None = None,
        chunk: int = 64,
        generator: torch.Generator | None = None,
        kernel_fn: Callable[[Tensor], Tensor] | None = None,
        kernel_epsilon: float = 1e-3,
    ) -> None:
        super().__init__()
        self.kernel_epsilon = _check_kernel(kernel_fn, kernel_epsilon)
        self.kernel_fn = kernel_fn
        self.num_features = check_positive_int("num_features", num_features)
        if redraw_interval is not None:
            check_positive_int("redraw_interval", redraw_interval)
        self.redraw_interval = redraw_interval
        self.chunk = check_positive_int("chunk", chunk)
        self.calls_since_redraw = 0
        self.head_dim = None if head_dim is None else check_positive_int("head_dim", head_dim)
        self.register_buffer("projection", None)
        if self.head_dim is None:
            self._generator = generator  # draws the features in bind, then dropped
        else:
            self._generator = None
            self.projection = orthogonal_gaussian(num_features, self.head_dim, generator=generator)

    def bind(self, num_heads: int, head_dim_k: int, head_dim_v: int) -> PerformerAttention:
        """Draw the features for ``head_dim_k`` if no ``head_dim`` was given (else check it)."""
        super().bind(num_heads, head_dim_k, head_dim_v)
        if self.head_dim is None:
            self.head_dim = head_dim_k
            generator, self._generator = self._generator, None
            self.projection = orthogonal_gaussian(
                self.num_features, head_dim_k, generator=generator
            )
        elif self.head_dim != head_dim_k:
            raise ValueError(
                f"this PerformerAttention was built for head_dim={self.head_dim}, but the module "
                f"has head_dim_k={head_dim_k}; leave head_dim out to take the module's"
            )
        return self

    @torch.no_grad()
    def redraw_features(self, generator: torch.Generator | None = None) -> None:
        """Draw new orthogonal random features in place."""
        if self.projection is None or self.head_dim is None:
            raise ValueError("this PerformerAttention has no features yet (no head_dim given)")
        new = orthogonal_gaussian(self.num_features, self.head_dim, generator=generator)
        self.projection.copy_(new)
        self.calls_since_redraw = 0

    def attend(self, call: EfficientCall) -> AttentionOutput:
        if self.projection is None:
            raise ValueError(
                "this PerformerAttention has no features yet: give head_dim, or run it in a "
                "MultiHeadAttention (which gives its head size)"
            )
        if self.training and self.redraw_interval is not None:
            if self.calls_since_redraw >= self.redraw_interval:
                self.redraw_features()
            self.calls_since_redraw += 1
        return _favor(call, self.projection, self.chunk, self.kernel_fn, self.kernel_epsilon)

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, num_features={self.num_features}, "
            f"redraw_interval={self.redraw_interval}"
            + ("" if self.kernel_fn is None else f", kernel_epsilon={self.kernel_epsilon}")
        )


def redraw_performer_features(model: nn.Module, generator: torch.Generator | None = None) -> int:
    """Redraw the random features of every :class:`PerformerAttention` inside ``model`` (for
    instance each ``ak.MultiHeadAttention(attention="performer")`` of a Transformer), as the
    paper's training redraws them; returns how many modules were redrawn.

    Args:
        model: any module.
        generator: the random source (``None``: torch's global one).

    Returns:
        The number of :class:`PerformerAttention` modules redrawn.

    Example::

        >>> import attnkit as ak
        >>> mha = ak.MultiHeadAttention(32, 4, batch_first=True, attention="performer")
        >>> redraw_performer_features(mha)
        1
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    redrawn = 0
    for module in model.modules():
        if isinstance(module, PerformerAttention):
            module.redraw_features(generator)
            redrawn += 1
    return redrawn
