"""A learned bias read by a ``score_mod`` gets its gradient, whatever route the mod takes to it.

The bias is Graphormer's edge encoding (Ying et al. 2021; attention-gym's Graphormer mod): a
learned table ``T [E, H]`` of one bias per edge type and head, added to the scaled dot product,

    s[b, h, i, j] = q_i · k_j / sqrt(D) + T[edge[b, i, j], h],   a = softmax_j(s),   c = a v,

and the mod reaches ``T`` through a closure, another mod, a ``functools.partial``, a global, an
object attribute, a callable object, a module, or a list / dict. Every gradient (``q``, ``k``,
``v`` and ``T``) is checked against autograd through that formula materialised in float64, for
the engine's own choice of backend and for each backend that accepts a ``score_mod``. A tensor
that cannot be reached is refused with one line naming it, never left without its gradient.
"""

from __future__ import annotations

import functools
import math
import types
import weakref

import pytest
import torch
from torch import Tensor, nn

import attnkit as ak
from attnkit.core.engine import BACKENDS

B, H, M, N, D, EDGE_TYPES = 2, 3, 5, 7, 4, 6
MOD_BACKENDS = [b.name for b in BACKENDS if b.score_mod]


def edge_bias(table: Tensor, edges: Tensor, b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
    """``T[edge[b, q, kv], h]`` at broadcast indices (the mod's body, shared by every route)."""
    return table[edges[b, q, kv], h]


def inputs(seed: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor, nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    q, k, v = (
        torch.randn(B, H, length, D, generator=g, dtype=torch.float64) for length in (M, N, N)
    )
    edges = torch.randint(EDGE_TYPES, (B, M, N), generator=g)
    table = nn.Parameter(torch.randn(EDGE_TYPES, H, generator=g, dtype=torch.float64))
    return q, k, v, edges, table


def reference_gradients(q, k, v, edges, table, upstream) -> list[Tensor]:
    """Gradients of ``Σ upstream · c`` through the materialised float64 formula."""
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v, table)]
    q, k, v, table = leaves
    bias = table[edges].permute(0, 3, 1, 2)  # [B, M, N, H] -> [B, H, M, N]
    s = q @ k.transpose(-2, -1) / math.sqrt(D) + bias
    c = torch.softmax(s, dim=-1) @ v
    return list(torch.autograd.grad((c * upstream).sum(), leaves))


# --- the routes by which a score_mod reaches the table ---------------------------------------

_SETTINGS = types.SimpleNamespace(table=None, edges=None)


def _global_mod(score, b, h, q_idx, kv_idx):
    return score + edge_bias(_GLOBAL_TABLE, _GLOBAL_EDGES, b, h, q_idx, kv_idx)  # noqa: F821


def _settings_mod(score, b, h, q_idx, kv_idx):
    return score + edge_bias(_SETTINGS.table, _SETTINGS.edges, b, h, q_idx, kv_idx)


def _partial_mod(score, b, h, q_idx, kv_idx, *, table, edges):
    return score + edge_bias(table, edges, b, h, q_idx, kv_idx)


class EdgeEncoding:
    """Holds the table as an attribute; its method and its ``__call__`` are mods."""

    def __init__(self, table: Tensor, edges: Tensor) -> None:
        self.table, self.edges = table, edges

    def mod(self, score, b, h, q_idx, kv_idx):
        return score + edge_bias(self.table, self.edges, b, h, q_idx, kv_idx)

    def __call__(self, score, b, h, q_idx, kv_idx):
        return self.mod(score, b, h, q_idx, kv_idx)


class EdgeModule(nn.Module):
    def __init__(self, table: nn.Parameter, edges: Tensor) -> None:
        super().__init__()
        self.table = table
        self.register_buffer("edges", edges)

    def forward(self, score, b, h, q_idx, kv_idx):
        return score + edge_bias(self.table, self.edges, b, h, q_idx, kv_idx)


def closure(table, edges):
    def mod(score, b, h, q_idx, kv_idx):
        return score + edge_bias(table, edges, b, h, q_idx, kv_idx)

    return mod


def another_mod(table, edges):
    inner = closure(table, edges)
    return lambda score, b, h, q_idx, kv_idx: inner(score * 1.0, b, h, q_idx, kv_idx)


def partial(table, edges):
    return functools.partial(_partial_mod, table=table, edges=edges)


def global_name(table, edges):
    globals().update(_GLOBAL_TABLE=table, _GLOBAL_EDGES=edges)
    return _global_mod


def global_object(table, edges):
    _SETTINGS.table, _SETTINGS.edges = table, edges
    return _settings_mod


def bound_method(table, edges):
    return EdgeEncoding(table, edges).mod


def callable_object(table, edges):
    return EdgeEncoding(table, edges)


def module(table, edges):
    return EdgeModule(table, edges)


def in_a_list(table, edges):
    held = [table, edges]
    return lambda score, b, h, q_idx, kv_idx: score + edge_bias(*held, b, h, q_idx, kv_idx)


def in_a_dict(table, edges):
    held = {"bias": {"edge": (table,)}, "edges": edges}

    def mod(score, b, h, q_idx, kv_idx):
        return score + edge_bias(held["bias"]["edge"][0], held["edges"], b, h, q_idx, kv_idx)

    return mod


ROUTES = [
    closure,
    another_mod,
    partial,
    global_name,
    global_object,
    bound_method,
    callable_object,
    module,
    in_a_list,
    in_a_dict,
]


@pytest.mark.parametrize("backend", [None, *MOD_BACKENDS], ids=["default", *MOD_BACKENDS])
@pytest.mark.parametrize("route", ROUTES, ids=[r.__name__ for r in ROUTES])
def test_the_bias_gets_the_formulas_gradient(route, backend) -> None:
    q, k, v, edges, table = inputs()
    upstream = torch.randn(
        B, H, M, D, dtype=torch.float64, generator=torch.Generator().manual_seed(9)
    )
    expected = reference_gradients(q, k, v, edges, table, upstream)
    leaves = [t.requires_grad_(True) for t in (q, k, v)]
    mod = route(table, edges)
    chosen = next((b for b in BACKENDS if b.name == backend), None)
    if chosen is not None and not chosen.gradients:
        # a forward-only backend is refused, naming why; it never returns a graph-less output
        with pytest.raises(ValueError, match="gradients are needed"):
            ak.attention(q, k, v, score_mod=mod, backend=backend)
        return
    out = ak.attention(q, k, v, score_mod=mod, backend=backend).context
    grads = torch.autograd.grad((out * upstream).sum(), [*leaves, table])
    for name, got, want in zip(("q", "k", "v", "table"), grads, expected, strict=True):
        assert (got - want).abs().max() <= 1e-10, name


def test_a_float32_bias_matches_the_float64_formula() -> None:
    q, k, v, edges, table = inputs(1)
    upstream = torch.randn(
        B, H, M, D, dtype=torch.float64, generator=torch.Generator().manual_seed(2)
    )
    expected = reference_gradients(q, k, v, edges, table, upstream)[3]
    table32 = nn.Parameter(table.detach().float())
    out = ak.attention(q.float(), k.float(), v.float(), score_mod=in_a_dict(table32, edges))
    (got,) = torch.autograd.grad((out.context * upstream.float()).sum(), [table32])
    # float32 against float64: the error of the same formula computed naively in float32, x2
    naive = reference_gradients(q.float(), k.float(), v.float(), edges, table32, upstream.float())
    floor = (naive[3].double() - expected).abs().max()
    assert (got.double() - expected).abs().max() <= 2 * floor + 1e-6


def out_of_sight(table, edges):
    """The table behind a weakref: no walk of objects reaches it."""
    ref = weakref.ref(table)
    return lambda score, b, h, q_idx, kv_idx: score + edge_bias(ref(), edges, b, h, q_idx, kv_idx)


@pytest.mark.parametrize("qkv_grad", [False, True], ids=["only-the-table", "qkv-too"])
@pytest.mark.parametrize("backend", [None, "tiled"], ids=["default", "tiled"])
def test_a_tensor_out_of_sight_is_refused_naming_it(backend, qkv_grad) -> None:
    q, k, v, edges, table = inputs()
    for t in (q, k, v):
        t.requires_grad_(qkv_grad)
    mod = out_of_sight(table, edges)
    with pytest.raises(ValueError) as error:
        ak.attention(q, k, v, score_mod=mod, backend=backend)
    message = str(error.value)
    assert "\n" not in message
    assert f"a Parameter of shape ({EDGE_TYPES}, {H}), torch.float64" in message
    assert "no gradient" in message
    # without autograd nothing needs it: the forward runs
    with torch.no_grad():
        ak.attention(q, k, v, score_mod=mod, backend=backend)


@pytest.mark.parametrize("backend", ["chunked", "reference"])
def test_materialising_backends_reach_any_tensor(backend) -> None:
    """Backends under ordinary autograd need no search: the weakref'd table gets its gradient."""
    q, k, v, edges, table = inputs()
    upstream = torch.randn(B, H, M, D, dtype=torch.float64)
    expected = reference_gradients(q, k, v, edges, table, upstream)[3]
    out = ak.attention(q, k, v, score_mod=out_of_sight(table, edges), backend=backend)
    (got,) = torch.autograd.grad((out.context * upstream).sum(), [table])
    assert (got - expected).abs().max() <= 1e-10


@pytest.mark.parametrize("route", [global_name, out_of_sight], ids=["global", "out-of-sight"])
def test_the_forward_only_kernel_is_passed_over_when_the_mod_needs_gradients(route) -> None:
    """A call large enough for compiled FlexAttention (which has no backward) whose only tensor
    requiring grad is the mod's table is not sent there. ``ak.explain`` computes nothing, so the
    thin inputs (d = 1) cost nothing."""
    q, k = torch.randn(1, 1, 8192, 1), torch.randn(1, 1, 4096, 1)
    table = nn.Parameter(torch.randn(EDGE_TYPES, 1))
    edges = torch.zeros(1, 1, 1, dtype=torch.long).expand(1, 8192, 4096)
    report = ak.explain(q, k, k, score_mod=route(table, edges))
    assert "runs on: flex" not in report
    assert "passed over flex" in report and "gradients are needed" in report
    with torch.no_grad():  # nothing needs a gradient: the kernel may run
        assert "gradients are needed" not in ak.explain(q, k, k, score_mod=route(table, edges))
