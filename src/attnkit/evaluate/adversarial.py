"""Adversarial attention (Jain & Wallace 2019, "Attention is not Explanation", §4.2).

For one example, search attention weights ``ã`` as different as possible from the model's own
``a`` while the output stays within ``ε`` of the original:

    maximise  JSD(a, ã)   subject to   TVD(ŷ(ã), ŷ(a)) <= ε

If such ``ã`` exists, the attention the model happened to compute is not the only explanation of
its output. The weights of one module are parameterised as ``ã = softmax(s)`` over the admissible
keys and ``s`` is optimised with Adam on ``JSD - λ·max(0, TVD - ε)``; the most different
feasible ``ã`` seen is returned. With ``per_example=True`` every example of the batch is its own
problem (its own JSD, its own constraint ``TVD_b <= ε``, its own best ``ã_b``), so a batch of
examples is searched at once, as Jain & Wallace search each test instance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnkit.evaluate.ablation import ablate


@dataclass(frozen=True)
class AdversarialAttention:
    """Result of :func:`adversarial_attention`.

    Attributes:
        weights: the adversarial weights ``ã`` ``[B, H, M, N]`` (the original if none feasible).
        original: the model's weights ``a``.
        jsd: Jensen–Shannon divergence (base e, mean over rows) between ``a`` and ``ã``.
        tvd: total variation distance between the outputs (mean over the batch).
        found: whether a feasible ``ã`` other than ``a`` was found (for any example).
        example_jsd: with ``per_example=True``, the JSD of each example's ``ã_b`` ``[B]``
            (0 where none was found), else ``None``.
        example_tvd: with ``per_example=True``, each example's output TVD ``[B]``.
        example_found: with ``per_example=True``, bool ``[B]``.

    Example::

        >>> layer = ak.layers.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval()
        >>> x = torch.randn(1, 5, 16)
        >>> result = adversarial_attention(
        ...     layer, lambda: layer(x).mean(1)[:, :3].softmax(-1), "self_attn", steps=5)
        >>> result.weights.shape, result.original.shape
        (torch.Size([1, 2, 5, 5]), torch.Size([1, 2, 5, 5]))
    """

    weights: Tensor
    original: Tensor
    jsd: float
    tvd: float
    found: bool
    example_jsd: Tensor | None = None
    example_tvd: Tensor | None = None
    example_found: Tensor | None = None


def jensen_shannon(p: Tensor, q: Tensor, eps: float = 1e-12) -> Tensor:
    """``JSD(p, q) = ½ KL(p ‖ m) + ½ KL(q ‖ m)``, ``m = ½ (p + q)``, per row ``[..., N] → [...]``."""
    m = 0.5 * (p + q)

    def kl(x: Tensor) -> Tensor:
        # clamped logs, not xlogy: a masked key has x = 0, and xlogy's gradient there is -inf,
        # which the softmax over the admissible keys turns into NaN for every weight
        return (x * (x.clamp_min(eps).log() - m.clamp_min(eps).log())).sum(-1)

    return 0.5 * kl(p) + 0.5 * kl(q)


def total_variation(p: Tensor, q: Tensor) -> Tensor:
    """``TVD(p, q) = ½ Σ |p - q|`` per row ``[..., C] → [...]``."""
    return 0.5 * (p - q).abs().sum(-1)


def _constant(weights: Tensor) -> Callable[[Tensor, Tensor], Tensor]:
    def replacement(_weights: Tensor, _admissible: Tensor) -> Tensor:
        return weights

    return replacement


def adversarial_attention(
    model: nn.Module,
    forward: Callable[[], Tensor],
    module: str,
    *,
    epsilon: float = 0.01,
    steps: int = 200,
    lr: float = 0.1,
    penalty: float = 100.0,
    seed: int = 0,
    per_example: bool = False,
) -> AdversarialAttention:
    """Most different attention of ``module`` that keeps ``model``'s output within ``epsilon``.

    Args:
        model: a model whose ``module`` attends through attnkit's engine, called once per forward.
        forward: runs the model on the one example and returns output probabilities ``[B, C]``
            (apply the softmax/sigmoid yourself).
        module: name of the attention module in ``model.named_modules()``.
        epsilon: largest total variation distance allowed between the outputs.
        steps, lr: Adam iterations and step size.
        penalty: ``λ``, weight of the constraint violation.
        seed: seeds the random start.
        per_example: one problem per example of the batch (``forward()`` must return ``[B, C]``
            for the ``B`` of the weights): each ``ã_b`` maximises its own JSD under its own
            ``TVD_b <= ε``; ``jsd``/``tvd`` are then the means over the examples.

    Returns:
        An :class:`AdversarialAttention`: ``ã``, ``a``, their JSD and the outputs' TVD.

    Example::

        >>> layer = ak.layers.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval()
        >>> x = torch.randn(1, 5, 16)
        >>> result = adversarial_attention(
        ...     layer, lambda: layer(x).mean(1)[:, :3].softmax(-1), "self_attn", steps=5)
        >>> result.tvd <= 0.01 or not result.found
        True
    """
    if epsilon < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    seen: list[Tensor] = []

    def keep(weights: Tensor, _admissible: Tensor) -> Tensor:
        seen.append(weights.detach())
        return weights  # the identity replacement: the model as it is, its weights kept

    with torch.no_grad(), ablate(model, keep, modules=[module]):
        reference = forward().detach()
    if not seen:
        raise ValueError(f"module {module!r} computed no attention in forward()")
    original = seen[-1]
    if original.dim() != 4:
        raise ValueError(f"expected weights [B, H, M, N], got {tuple(original.shape)}")
    admissible = original > 0  # where the model could attend (masked keys have zero weight)
    generator = torch.Generator().manual_seed(seed)
    noise = torch.randn(original.shape, generator=generator, dtype=original.dtype)
    scores = (original.clamp_min(1e-6).log() + noise).requires_grad_(True)
    # Adam (Kingma & Ba 2015) written out: torch.optim's first use imports the compiler stack
    # (seconds), too slow for one small search
    moment, second = torch.zeros_like(scores), torch.zeros_like(scores)
    beta1, beta2 = 0.9, 0.999

    def candidate() -> Tensor:
        return scores.masked_fill(~admissible, float("-inf")).softmax(-1).nan_to_num(0.0)

    if per_example:
        if reference.dim() != 2 or reference.shape[0] != original.shape[0]:
            raise ValueError(
                f"per_example needs forward() -> [B, C] with B={original.shape[0]} as the weights, "
                f"got {tuple(reference.shape)}"
            )
        return _search_per_example(
            model,
            forward,
            module,
            original,
            reference,
            candidate,
            scores,
            epsilon,
            steps,
            lr,
            penalty,
        )
    best, best_jsd, best_tvd = original, 0.0, 0.0
    for step in range(1, steps + 1):
        weights = candidate()
        with ablate(model, _constant(weights), modules=[module]):
            output = forward()
        tvd = total_variation(output, reference).mean()
        jsd = jensen_shannon(original, weights).mean()
        with torch.no_grad():
            if float(tvd) <= epsilon and float(jsd) > best_jsd:
                best, best_jsd, best_tvd = weights.detach().clone(), float(jsd), float(tvd)
        objective = -jsd + penalty * torch.relu(tvd - epsilon)
        (grad,) = torch.autograd.grad(objective, scores)
        with torch.no_grad():
            moment.mul_(beta1).add_(grad, alpha=1 - beta1)
            second.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            step_size = lr * (1 - beta2**step) ** 0.5 / (1 - beta1**step)
            scores.sub_(step_size * moment / (second.sqrt() + 1e-8))
    return AdversarialAttention(best, original, best_jsd, best_tvd, best_jsd > 0)


def _search_per_example(
    model: nn.Module,
    forward: Callable[[], Tensor],
    module: str,
    original: Tensor,
    reference: Tensor,
    candidate: Callable[[], Tensor],
    scores: Tensor,
    epsilon: float,
    steps: int,
    lr: float,
    penalty: float,
) -> AdversarialAttention:
    """The search of :func:`adversarial_attention` with one problem per example: the objective is
    the sum over examples of ``-JSD_b + λ·max(0, TVD_b - ε)``, whose gradient with respect to
    example ``b``'s scores is that of its own problem (examples do not interact)."""
    batch = original.shape[0]
    best = original.clone()
    best_jsd = torch.zeros(batch, dtype=torch.float64)
    best_tvd = torch.zeros(batch, dtype=torch.float64)
    moment, second = torch.zeros_like(scores), torch.zeros_like(scores)
    beta1, beta2 = 0.9, 0.999
    for step in range(1, steps + 1):
        weights = candidate()
        with ablate(model, _constant(weights), modules=[module]):
            output = forward()
        tvd = total_variation(output, reference)  # [B]
        jsd = jensen_shannon(original, weights).flatten(1).mean(1)  # [B]: mean over heads, rows
        with torch.no_grad():
            better = (tvd <= epsilon) & (jsd > best_jsd.to(jsd.dtype))
            if bool(better.any()):
                best[better] = weights.detach()[better]
                best_jsd[better] = jsd.detach()[better].double()
                best_tvd[better] = tvd.detach()[better].double()
        objective = (-jsd + penalty * torch.relu(tvd - epsilon)).sum()
        (grad,) = torch.autograd.grad(objective, scores)
        with torch.no_grad():
            moment.mul_(beta1).add_(grad, alpha=1 - beta1)
            second.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            step_size = lr * (1 - beta2**step) ** 0.5 / (1 - beta1**step)
            scores.sub_(step_size * moment / (second.sqrt() + 1e-8))
    found = best_jsd > 0
    return AdversarialAttention(
        best,
        original,
        float(best_jsd.mean()),
        float(best_tvd.mean()),
        bool(found.any()),
        example_jsd=best_jsd,
        example_tvd=best_tvd,
        example_found=found,
    )
