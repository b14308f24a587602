"""Running ``torch.nn.MultiheadAttention`` through attnkit's engine, so sessions can reach inside.

torch's module computes its attention in one fused function, where nothing can replace the weights
or keep them in the autograd graph. ``ak.MultiHeadAttention`` is a drop-in with the same parameter
names and conventions, so while :func:`through_attnkit` is active each torch module's ``forward``
calls an ``ak.MultiHeadAttention`` of the same configuration on the torch module's own parameters
(``torch.func.functional_call``): same outputs up to rounding, gradients reach the same
parameters, and every engine session (ablation, ``record(grad=True)``) sees the call.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from torch import Tensor, nn
from torch.func import functional_call

from attnkit.mechanisms.multi_head import MultiHeadAttention


def attnkit_twin(module: nn.MultiheadAttention) -> MultiHeadAttention:
    """An ``ak.MultiHeadAttention`` with ``module``'s configuration, its parameters on the
    ``meta`` device (it is always called with ``module``'s parameters)."""
    return MultiHeadAttention(
        module.embed_dim,
        module.num_heads,
        dropout=module.dropout,
        bias=module.in_proj_bias is not None,
        add_bias_kv=module.bias_k is not None,
        add_zero_attn=module.add_zero_attn,
        kdim=module.kdim,
        vdim=module.vdim,
        batch_first=module.batch_first,
        device="meta",
    )


@contextmanager
def through_attnkit(modules: Sequence[nn.MultiheadAttention]) -> Iterator[None]:
    """While active, each of ``modules`` computes its forward with ``ak.MultiHeadAttention``."""
    patched = []
    try:
        for module in modules:
            twin = attnkit_twin(module)

            def forward(
                *args: Any,
                _module: nn.MultiheadAttention = module,
                _twin: MultiHeadAttention = twin,
                **kwargs: Any,
            ) -> tuple[Tensor, Tensor | None]:
                _twin.train(_module.training)
                tensors: dict[str, Tensor] = dict(_module.named_parameters())
                tensors.update(_module.named_buffers())
                out: tuple[Tensor, Tensor | None] = functional_call(_twin, tensors, args, kwargs)
                return out

            module.forward = forward  # type: ignore[method-assign]  # an instance attribute
            patched.append(module)
        yield
    finally:
        for module in patched:
            module.__dict__.pop("forward", None)
