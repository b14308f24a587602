"""``MultiHeadAttention`` (survey §3.3.2, eq. 38-40): a drop-in for ``torch.nn.MultiheadAttention``.

Two kinds of ground truth: torch's own module (its ``state_dict`` copied in, outputs and weights
compared in eval mode across every configuration torch supports), and the survey's formula written
out below in float64 loops (per-head projections, per-head attention, concatenation, output
projection) for what torch cannot do (any score per head, grouped-query, own head sizes).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn

import attnkit as ak
from attnkit.core.kinds import kind_names
from attnkit.mechanisms.multi_head import HeadwiseScore, MultiHeadAttention

F32, F64 = torch.float32, torch.float64
E, H = 16, 4
N, L, S = 3, 5, 7
TOL = {F32: 1e-5, F64: 1e-12}


def perturb(module: nn.Module, seed: int) -> None:
    """Random values for every parameter (torch initialises the biases to zero)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=g, dtype=F64).to(p.dtype))


def torch_and_ours(
    dtype: torch.dtype = F32, seed: int = 0, **kwargs
) -> tuple[nn.Module, nn.Module]:
    """A torch MHA with random parameters and ours with its state_dict, both in eval mode."""
    torch.manual_seed(seed)
    reference = nn.MultiheadAttention(E, H, dtype=dtype, **kwargs)
    perturb(reference, seed)
    ours = MultiHeadAttention(E, H, dtype=dtype, **kwargs)
    ours.load_state_dict(reference.state_dict())
    return reference.eval(), ours.eval()


# --------------------------------------------------------------------------------------------
# Same parameters as torch
# --------------------------------------------------------------------------------------------

LAYOUTS = [
    {},
    {"kdim": 5, "vdim": 7},
    {"kdim": 5},
    {"bias": False},
    {"add_bias_kv": True},
    {"add_bias_kv": True, "bias": False, "vdim": 3},
]


@pytest.mark.parametrize("kwargs", LAYOUTS, ids=str)
def test_parameters_have_torch_names_and_shapes(kwargs):
    reference = nn.MultiheadAttention(E, H, **kwargs)
    ours = MultiHeadAttention(E, H, **kwargs)
    theirs = {name: p.shape for name, p in reference.state_dict().items()}
    mine = {name: p.shape for name, p in ours.state_dict().items()}
    assert mine == theirs
    assert isinstance(ours.out_proj, nn.Linear)
    for name in ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight"):
        assert (getattr(ours, name) is None) == (getattr(reference, name) is None)
    # Both directions load strictly.
    ours.load_state_dict(reference.state_dict())
    reference.load_state_dict(ours.state_dict())


def test_parametric_score_adds_only_its_own_parameters():
    """torch's weights load into a module with a learned score; only ``score.*`` is left."""
    ours = MultiHeadAttention(E, H, score="additive")
    result = ours.load_state_dict(nn.MultiheadAttention(E, H).state_dict(), strict=False)
    assert result.unexpected_keys == []
    assert result.missing_keys and all(k.startswith("score.heads.") for k in result.missing_keys)


def test_initialisation_follows_torch():
    ours = MultiHeadAttention(E, H, add_bias_kv=True)
    assert torch.all(ours.in_proj_bias == 0) and torch.all(ours.out_proj.bias == 0)
    bound = math.sqrt(6 / (E + 3 * E))  # Xavier-uniform of the packed [3E, E]
    assert ours.in_proj_weight.abs().max() <= bound
    assert ours.bias_k.abs().sum() > 0


def test_grouped_query_and_own_head_sizes_use_separate_projections():
    mha = MultiHeadAttention(E, H, num_kv_heads=2, head_dim_v=3, bias=True, add_bias_kv=True)
    shapes = {name: tuple(p.shape) for name, p in mha.state_dict().items()}
    assert shapes == {
        "q_proj_weight": (H * 4, E),
        "k_proj_weight": (2 * 4, E),
        "v_proj_weight": (2 * 3, E),
        "in_proj_bias": (H * 4 + 2 * 4 + 2 * 3,),
        "bias_k": (1, 1, 2 * 4),
        "bias_v": (1, 1, 2 * 3),
        "out_proj.weight": (E, H * 3),
        "out_proj.bias": (E,),
    }
    assert mha.in_proj_weight is None and not mha._qkv_same_embed_dim


# --------------------------------------------------------------------------------------------
# Same results as torch, in every configuration
# --------------------------------------------------------------------------------------------

# (id, module kwargs, input options): self (query is key is value), batched, L/S, key padding
# mask kind, attn_mask kind, is_causal.
CASES: list[tuple[str, dict, dict]] = [
    ("cross", {}, {}),
    ("batch_first", {"batch_first": True}, {}),
    ("unbatched", {}, {"batched": False}),
    ("unbatched_masks", {}, {"batched": False, "kpm": "bool", "attn": "3d_bool"}),
    ("self", {}, {"self": True}),
    ("self_batch_first", {"batch_first": True}, {"self": True, "kpm": "bool"}),
    ("kdim_vdim", {"kdim": 5, "vdim": 7, "batch_first": True}, {}),
    ("no_bias", {"bias": False}, {"kpm": "bool"}),
    ("bias_kv", {"add_bias_kv": True}, {"attn": "2d_bool"}),
    ("zero_attn", {"add_zero_attn": True}, {"kpm": "float"}),
    (
        "bias_kv_zero_attn",
        {"add_bias_kv": True, "add_zero_attn": True, "kdim": 3},
        {"kpm": "bool", "attn": "3d_bool"},
    ),
    ("kpm_bool", {}, {"kpm": "bool"}),
    ("kpm_float", {"batch_first": True}, {"kpm": "float"}),
    ("mask_2d_bool", {}, {"attn": "2d_bool"}),
    ("mask_2d_float", {}, {"attn": "2d_float"}),
    ("mask_3d_bool", {"batch_first": True}, {"attn": "3d_bool"}),
    ("mask_3d_float", {}, {"attn": "3d_float", "kpm": "float"}),
    ("kpm_and_mask", {"batch_first": True}, {"attn": "2d_bool", "kpm": "bool"}),
    ("kpm_float_mask_bool", {"add_zero_attn": True}, {"attn": "2d_bool", "kpm": "float"}),
    ("is_causal_bool", {"batch_first": True}, {"self": True, "attn": "causal_bool"}),
    ("is_causal_float", {}, {"self": True, "attn": "causal_float", "kpm": "float"}),
]
WEIGHTS = [(True, True), (True, False), (False, True)]  # (need_weights, average_attn_weights)


def make_inputs(module: nn.Module, options: dict, dtype: torch.dtype, seed: int = 1):
    """``(query, key, value, call kwargs)`` in the module's layout; no query loses every key."""
    g = torch.Generator().manual_seed(seed)
    batched, self_attention = options.get("batched", True), options.get("self", False)
    length, src = (L, L) if self_attention else (L, S)

    def sequence(n: int, d: int) -> Tensor:
        x = torch.randn(N, n, d, generator=g, dtype=F64).to(dtype)
        if not batched:
            return x[0]
        return x if module.batch_first else x.transpose(0, 1).contiguous()

    query = sequence(length, E)
    if self_attention:
        key = value = query
    else:
        key, value = sequence(src, module.kdim), sequence(src, module.vdim)
    kwargs: dict = {}
    padded = torch.zeros(N, src, dtype=torch.bool)
    padded[1, -2:] = True
    padded[2, 1:] = True  # key 0 is never padded
    if options.get("kpm") == "bool":
        kwargs["key_padding_mask"] = padded if batched else padded[1]
    elif options.get("kpm") == "float":
        kpm = torch.randn(N, src, generator=g, dtype=F64).to(dtype)
        kpm = kpm.masked_fill(padded, float("-inf"))
        kwargs["key_padding_mask"] = kpm if batched else kpm[1]
    attn = options.get("attn")
    heads = N * H if batched else H
    if attn in ("2d_bool", "3d_bool"):
        shape = (length, src) if attn == "2d_bool" else (heads, length, src)
        blocked = torch.rand(shape, generator=g) < 0.4
        blocked[..., 0] = False
        kwargs["attn_mask"] = blocked
    elif attn in ("2d_float", "3d_float"):
        shape = (length, src) if attn == "2d_float" else (heads, length, src)
        bias = torch.randn(shape, generator=g, dtype=F64).to(dtype)
        bias = bias.masked_fill(torch.rand(shape, generator=g) < 0.3, float("-inf"))
        bias[..., 0] = 0.0
        kwargs["attn_mask"] = bias
    elif attn == "causal_bool":
        kwargs["attn_mask"] = torch.ones(length, src, dtype=torch.bool).triu(1)
        kwargs["is_causal"] = True
    elif attn == "causal_float":
        kwargs["attn_mask"] = nn.Transformer.generate_square_subsequent_mask(length, dtype=dtype)
        kwargs["is_causal"] = True
    return query, key, value, kwargs


@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")  # torch's warning
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
@pytest.mark.parametrize("need_weights,average", WEIGHTS, ids=["avg", "per_head", "no_weights"])
@pytest.mark.parametrize("name,module_kwargs,options", CASES, ids=[c[0] for c in CASES])
def test_matches_torch(name, module_kwargs, options, need_weights, average, dtype):
    reference, ours = torch_and_ours(dtype, **module_kwargs)
    query, key, value, kwargs = make_inputs(reference, options, dtype)
    call = {"need_weights": need_weights, "average_attn_weights": average, **kwargs}
    with torch.no_grad():
        expected, expected_weights = reference(query, key, value, **call)
    out, weights = ours(query, key, value, **call)
    assert out.shape == expected.shape and out.dtype == dtype
    torch.testing.assert_close(out, expected, rtol=0, atol=TOL[dtype])
    if need_weights:
        assert weights.shape == expected_weights.shape
        torch.testing.assert_close(weights, expected_weights, rtol=0, atol=TOL[dtype])
    else:
        assert weights is None and expected_weights is None


def test_output_layout_is_contiguous_like_torch():
    reference, ours = torch_and_ours()
    query, key, value, _ = make_inputs(reference, {}, F32)
    out, _ = ours(query, key, value)
    assert out.is_contiguous() and out.shape == (L, N, E)


def test_fully_masked_rows_give_zeros_where_torch_gives_nan():
    """Difference by design (pytorch/pytorch#41508): no admissible key → zero context (the
    output is ``out_proj.bias``) and zero weights, never NaN; other rows are unchanged."""
    reference, ours = torch_and_ours(batch_first=True)
    query, key, value, _ = make_inputs(reference, {}, F32)
    padding = torch.zeros(N, S, dtype=torch.bool)
    padding[1] = True  # example 1 has no key at all
    blocked = torch.zeros(L, S, dtype=torch.bool)
    blocked[2] = True  # query 2 may attend nothing
    call = {"key_padding_mask": padding, "attn_mask": blocked, "average_attn_weights": False}
    with torch.no_grad():
        expected, expected_weights = reference(query, key, value, **call)
    out, weights = ours(query, key, value, **call)
    assert torch.isnan(expected[1]).all() and torch.isnan(expected[:, 2]).all()
    assert not torch.isnan(out).any() and not torch.isnan(weights).any()
    bias = ours.out_proj.bias.detach()
    torch.testing.assert_close(out[1], bias.expand(L, E), rtol=0, atol=0)
    torch.testing.assert_close(out[:, 2], bias.expand(N, E), rtol=0, atol=0)
    assert torch.all(weights[1] == 0) and torch.all(weights[:, :, 2] == 0)
    fine = torch.ones(N, L, dtype=torch.bool)
    fine[1], fine[:, 2] = False, False
    torch.testing.assert_close(out[fine], expected[fine], rtol=0, atol=1e-5)
    torch.testing.assert_close(
        weights.transpose(1, 2)[fine], expected_weights.transpose(1, 2)[fine], rtol=0, atol=1e-5
    )


@pytest.mark.parametrize("extra", [{}, {"add_zero_attn": True}, {"add_bias_kv": True}], ids=str)
@pytest.mark.parametrize("length,src", [(L, L), (3, S), (S, 3)])
def test_is_causal_without_mask_is_bottom_right(length, src, extra):
    """Torch needs the mask; ours builds it: query ``i`` sees keys ``j <= i + S - L`` (top-left
    = bottom-right when L == S); appended keys (zero key, ``bias_k``) stay visible, as torch's
    padding of a given mask keeps them."""
    reference, ours = torch_and_ours(F64, batch_first=True, **extra)
    g = torch.Generator().manual_seed(3)
    query = torch.randn(N, length, E, generator=g, dtype=F64)
    key = torch.randn(N, src, E, generator=g, dtype=F64)
    value = torch.randn(N, src, E, generator=g, dtype=F64)
    allowed = torch.ones(length, src, dtype=torch.bool).tril(src - length)
    expected, expected_weights = reference(query, key, value, attn_mask=~allowed)
    out, weights = ours(query, key, value, is_causal=True)
    seen = allowed.any(-1) | bool(extra)  # L > S: the first L - S queries see no key at all
    torch.testing.assert_close(out[:, seen], expected[:, seen], rtol=0, atol=1e-12)
    torch.testing.assert_close(weights[:, seen], expected_weights[:, seen], rtol=0, atol=1e-12)
    assert torch.all(out[:, ~seen] == ours.out_proj.bias.detach()) and not weights[:, ~seen].any()
    if length == src:
        square = nn.Transformer.generate_square_subsequent_mask(length, dtype=F64)
        torch.testing.assert_close(
            reference(query, key, value, attn_mask=square, is_causal=True)[0],
            out,
            rtol=0,
            atol=1e-12,
        )


def test_drop_in_inside_transformer_encoder_layer():
    """Swapped into ``nn.TransformerEncoderLayer`` with torch's weights: same outputs."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, H, dim_feedforward=32, dropout=0.0, batch_first=True)
    perturb(layer, 0)
    swapped = nn.TransformerEncoderLayer(E, H, dim_feedforward=32, dropout=0.0, batch_first=True)
    swapped.load_state_dict(layer.state_dict())
    swapped.self_attn = MultiHeadAttention(E, H, batch_first=True)
    swapped.self_attn.load_state_dict(layer.self_attn.state_dict())
    x = torch.randn(N, L, E)
    padding = torch.zeros(N, L, dtype=torch.bool)
    padding[1, -2:] = True
    expected = layer(x, src_key_padding_mask=padding)  # training mode: torch's ordinary path
    torch.testing.assert_close(
        swapped(x, src_key_padding_mask=padding), expected, rtol=0, atol=1e-5
    )


def test_encoder_fast_path_never_bypasses_a_non_torch_score():
    """``nn.TransformerEncoderLayer``'s eval fast path runs torch's kernel on ``in_proj_weight``
    when ``self_attn._qkv_same_embed_dim``; for another score that would silently compute
    torch's attention, so the flag is False and our module is called."""
    layer = nn.TransformerEncoderLayer(E, H, dim_feedforward=32, batch_first=True).eval()
    layer.self_attn = MultiHeadAttention(E, H, batch_first=True, score="additive").eval()
    assert MultiHeadAttention(E, H)._qkv_same_embed_dim
    assert not layer.self_attn._qkv_same_embed_dim
    calls = []
    layer.self_attn.register_forward_hook(lambda *args: calls.append(1))
    with torch.no_grad():
        layer(torch.randn(2, L, E))
    assert calls == [1]


# --------------------------------------------------------------------------------------------
# Grouped-query / multi-query attention
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_kv_heads", [1, 2])
def test_grouped_query_equals_multi_head_with_repeated_kv_weights(num_kv_heads):
    """GQA: each key/value head serves ``H / G`` query heads, so it equals torch's MHA whose
    key/value projections (and ``bias_k``/``bias_v``) repeat each group's rows per query head."""
    torch.manual_seed(0)
    ours = MultiHeadAttention(
        E, H, num_kv_heads=num_kv_heads, batch_first=True, add_bias_kv=True, dtype=F64
    )
    perturb(ours, 4)
    d, group = E // H, H // num_kv_heads

    def repeat(rows: Tensor) -> Tensor:  # [G·d, ...] -> [H·d, ...], head j reads group j // group
        return rows.unflatten(0, (num_kv_heads, d)).repeat_interleave(group, 0).flatten(0, 1)

    b_q, b_k, b_v = ours.in_proj_bias.detach().split([E, num_kv_heads * d, num_kv_heads * d])
    reference = nn.MultiheadAttention(E, H, batch_first=True, add_bias_kv=True, dtype=F64)
    weights = [ours.q_proj_weight, repeat(ours.k_proj_weight), repeat(ours.v_proj_weight)]
    reference.load_state_dict(
        {
            "in_proj_weight": torch.cat(weights).detach(),
            "in_proj_bias": torch.cat([b_q, repeat(b_k), repeat(b_v)]),
            "bias_k": repeat(ours.bias_k.detach()[0, 0])[None, None],
            "bias_v": repeat(ours.bias_v.detach()[0, 0])[None, None],
            "out_proj.weight": ours.out_proj.weight.detach(),
            "out_proj.bias": ours.out_proj.bias.detach(),
        }
    )
    query, key, value, kwargs = make_inputs(reference, {"kpm": "bool", "attn": "3d_bool"}, F64)
    expected, expected_weights = reference(query, key, value, **kwargs, average_attn_weights=False)
    out, weights = ours(query, key, value, **kwargs, average_attn_weights=False)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(weights, expected_weights, rtol=0, atol=1e-12)


# --------------------------------------------------------------------------------------------
# Eq. (38)-(40) written out, for any score per head
# --------------------------------------------------------------------------------------------


def literal_score(score: nn.Module, q: Tensor, k: Tensor) -> Tensor:
    """Table 2 for one query ``q [d_k]`` and one key ``k [d_k]``, from the score's parameters:
    a scalar, or a vector ``[d_v]`` for the multi-dimensional additive score (eq. 31)."""
    kind = type(score).__name__
    if kind == "Additive":
        W1, W2 = score.query_proj.weight.detach(), score.key_proj.weight.detach()
        b = score.key_proj.bias.detach()
        w = score.out.weight.detach()  # [1 or d_v, d_w]
        e = w @ torch.tanh(W1 @ q + W2 @ k + b)
        return e[0] if score.value_features is None else e
    if kind == "General":
        return k @ (score.query_proj.weight.detach() @ q)
    if kind == "ScaledDot":
        return (q @ k) / math.sqrt(k.numel())
    if kind == "Dot":
        return q @ k
    if kind == "Cosine":
        return (q @ k) / (q.norm() * k.norm())
    raise AssertionError(kind)


def literal_sparsemax(z: Tensor) -> Tensor:
    """Martins & Astudillo (2016), Algorithm 1."""
    zs = torch.sort(z, descending=True).values
    ks = torch.arange(1, z.numel() + 1, dtype=z.dtype)
    support = 1 + ks * zs > torch.cumsum(zs, 0)
    k = int(support.sum())
    tau = (zs[:k].sum() - 1) / k
    return torch.clamp(z - tau, min=0)


def literal_multi_head(
    mha: MultiHeadAttention,
    query: Tensor,
    features_k: Tensor,
    features_v: Tensor,
    allowed: Tensor,
    align: Callable[[Tensor], Tensor],
) -> tuple[Tensor, Tensor]:
    """Eq. (38)-(40) for ``query [N, L, E]``, features ``[N, S, ·]`` and key padding ``allowed
    [N, S]`` (True = real key), one example, head, query and key at a time. Returns the output
    ``[N, L, E]`` and the weights ``[N, H, L, S]`` (``[..., d_v]`` multi-dimensional)."""
    h, g, dk, dv = mha.num_heads, mha.num_kv_heads, mha.head_dim_k, mha.head_dim_v
    Wq, Wk, Wv = (w.detach() for w in (mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight))
    Wo = mha.out_proj.weight.detach()
    scores = list(mha.score.heads) if isinstance(mha.score, HeadwiseScore) else [mha.score] * h
    n, length, s = query.shape[0], query.shape[1], features_k.shape[1]
    outputs = torch.zeros(n, length, mha.embed_dim, dtype=F64)
    weights = []
    for b in range(n):
        per_head_weights = []
        contexts = []
        for j in range(h):
            group = j // (h // g)  # the key/value head this query head reads
            Wq_j = Wq[j * dk : (j + 1) * dk]
            Wk_j = Wk[group * dk : (group + 1) * dk]
            Wv_j = Wv[group * dv : (group + 1) * dv]
            q_j = query[b] @ Wq_j.T  # eq. (38): q^(j) = W_q^(j) q, one row per query
            K_j = features_k[b] @ Wk_j.T  # K^(j) = W_K^(j) F
            V_j = features_v[b] @ Wv_j.T  # V^(j) = W_V^(j) F
            c_j = torch.zeros(length, dv, dtype=F64)
            a_j = []
            for i in range(length):
                e = torch.stack([literal_score(scores[j], q_j[i], K_j[l]) for l in range(s)])
                real = allowed[b]
                a = torch.zeros_like(e)
                if e.dim() == 1:
                    a[real] = align(e[real])
                else:  # eq. (32): one alignment per value feature
                    for f in range(dv):
                        a[real, f] = align(e[real, f])
                for l in range(s):
                    c_j[i] += a[l] * V_j[l]  # eq. (39): c^(j) = Σ_l a_l^(j) v_l^(j)
                a_j.append(a)
            contexts.append(c_j)
            per_head_weights.append(torch.stack(a_j))
        c = torch.cat(contexts, dim=-1)  # concat(c^(1), …, c^(d))  [L, H·d_v]
        outputs[b] = c @ Wo.T  # eq. (40): c = W_O concat(...)
        weights.append(torch.stack(per_head_weights))
    return outputs, torch.stack(weights)


LITERAL_CASES = [
    ("additive_per_head_gqa", {"score": "additive", "num_kv_heads": 2}),
    ("mixed_scores", {"score": ["additive", "general", "scaled_dot", "cosine"]}),
    ("own_head_sizes", {"score": "additive", "head_dim_k": 3, "head_dim_v": 5, "num_kv_heads": 1}),
    ("shared_additive_object", {"score": ak.scores.Additive(4, 4, 6)}),
    ("multi_dimensional", {"score": ak.scores.Additive(4, 4, 6, value_features=4)}),
    ("sparsemax", {"score": "general", "align": "sparsemax", "num_kv_heads": 2}),
]


@pytest.mark.parametrize("name,kwargs", LITERAL_CASES, ids=[c[0] for c in LITERAL_CASES])
def test_against_literal_eq_38_to_40(name, kwargs):
    """The module equals eq. (38)-(40) computed head by head from its own parameters
    (``bias=False``: the survey's projections have no biases)."""
    torch.manual_seed(0)
    kwargs = dict(kwargs)
    if isinstance(kwargs["score"], nn.Module):
        kwargs["score"] = kwargs["score"].double()
    mha = MultiHeadAttention(E, H, bias=False, kdim=6, vdim=9, batch_first=True, **kwargs)
    mha = mha.double()
    perturb(mha, 1)
    g = torch.Generator().manual_seed(2)
    query = torch.randn(2, L, E, generator=g, dtype=F64)
    key = torch.randn(2, S, 6, generator=g, dtype=F64)
    value = torch.randn(2, S, 9, generator=g, dtype=F64)
    allowed = torch.ones(2, S, dtype=torch.bool)
    allowed[1, 4:] = False
    out, weights = mha(query, key, value, key_padding_mask=~allowed, average_attn_weights=False)
    align = literal_sparsemax if kwargs.get("align") == "sparsemax" else lambda e: e.softmax(0)
    expected, expected_weights = literal_multi_head(mha, query, key, value, allowed, align)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)
    torch.testing.assert_close(weights, expected_weights, rtol=0, atol=1e-10)


def test_parametric_score_names_give_each_head_its_own_parameters():
    mha = MultiHeadAttention(E, H, score="additive", head_dim_k=3, head_dim_v=2)
    assert isinstance(mha.score, HeadwiseScore) and len(mha.score.heads) == H
    assert len({id(s.query_proj.weight) for s in mha.score.heads}) == H
    assert mha.score.heads[0].query_proj.weight.shape == (3, 3)  # built with per-head sizes
    shared = ak.scores.Additive(4, 4, 8)
    assert MultiHeadAttention(E, H, score=shared).score is shared
    assert type(MultiHeadAttention(E, H, score="dot").score) is ak.scores.Dot


# --------------------------------------------------------------------------------------------
# Gradients, padding, dropout
# --------------------------------------------------------------------------------------------

GRAD_CASES = [
    ("torch_like", {"add_bias_kv": True, "add_zero_attn": True, "kdim": 3}),
    ("additive_gqa", {"score": "additive", "num_kv_heads": 1, "head_dim_v": 3}),
]


@pytest.mark.parametrize("name,kwargs", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
@pytest.mark.parametrize("need_weights", [True, False])
def test_gradcheck(name, kwargs, need_weights):
    """Float64 gradients w.r.t. the inputs and every parameter, with a padding mask and a float
    attention mask."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(4, 2, batch_first=True, dtype=F64, **kwargs)
    perturb(mha, 5)
    params = list(mha.parameters())  # gradcheck perturbs these in place: the module reads them
    query = torch.randn(2, 3, 4, dtype=F64, requires_grad=True)
    key = torch.randn(2, 4, mha.kdim, dtype=F64, requires_grad=True)
    value = torch.randn(2, 4, mha.vdim, dtype=F64, requires_grad=True)
    padding = torch.tensor([[False] * 4, [False, False, True, True]])
    bias = torch.randn(3, 4, dtype=F64)

    def fn(q, k, v, *_params):
        out, weights = mha(
            q,
            k,
            v,
            key_padding_mask=padding,
            attn_mask=bias,
            need_weights=need_weights,
            average_attn_weights=False,
        )
        return (out, weights) if need_weights else out

    # Fast mode (random projections of the Jacobian) for the per-head additive scores, whose
    # tiled backward makes the full Jacobian slow.
    fast = name == "additive_gqa"
    assert torch.autograd.gradcheck(fn, (query, key, value, *params), fast_mode=fast)


@pytest.mark.parametrize("score", ["scaled_dot", "additive"])
def test_padded_keys_get_zero_weight_and_zero_gradient(score):
    torch.manual_seed(0)
    mha = MultiHeadAttention(E, H, batch_first=True, score=score)
    perturb(mha, 2)
    query = torch.randn(N, L, E)
    key = torch.randn(N, S, E, requires_grad=True)
    value = torch.randn(N, S, E, requires_grad=True)
    padding = torch.zeros(N, S, dtype=torch.bool)
    padding[1, -3:] = True
    padding[2, 2:] = True
    out, weights = mha(query, key, value, key_padding_mask=padding, average_attn_weights=False)
    assert torch.all(weights[padding[:, None, None, :].expand_as(weights)] == 0)
    out.square().sum().backward()
    assert torch.all(key.grad[padding] == 0) and torch.all(value.grad[padding] == 0)
    assert key.grad[~padding].abs().sum() > 0 and value.grad[~padding].abs().sum() > 0


def test_dropout_only_in_training():
    """Dropout acts on the weights in training mode only; ``weights_after_dropout=False`` returns
    them before dropout (rows sum to 1). After dropout (the default) is tested against torch in
    test_multi_head_dropin.py."""
    torch.manual_seed(0)
    reference, ours = torch_and_ours(dropout=0.5, batch_first=True)
    query, key, value, _ = make_inputs(reference, {}, F32)
    eval_out, _ = ours(query, key, value)
    torch.testing.assert_close(eval_out, reference(query, key, value)[0], rtol=0, atol=1e-5)
    ours.train()
    torch.manual_seed(1)
    train_out, weights = ours(query, key, value, weights_after_dropout=False)
    assert (train_out - eval_out).abs().max() > 1e-3
    torch.testing.assert_close(weights.sum(-1), torch.ones(N, L), rtol=0, atol=1e-6)


# --------------------------------------------------------------------------------------------
# Taxonomy and bad input
# --------------------------------------------------------------------------------------------


def test_taxonomy():
    row = ak.taxonomy.describe(MultiHeadAttention(E, H))
    assert str(row) == (
        "Singular | Single-Level | Single-Representational | Scaled-Multiplicative | Global | "
        "Single-Dimensional | Self-Attentive | Multi-Head"
    )
    mixed = MultiHeadAttention(
        E, H, score=["additive", "general", "dot", "dot"], query_type="Basic"
    )
    names = ak.taxonomy.describe(mixed).names()
    assert names["scoring"] == {"Additive", "General", "Multiplicative"}
    assert names["query_type"] == {"Basic"}
    assert names["query_multiplicity"] == {"Multi-Head"}


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"attention": "no_such_kind"}, "unknown attention kind 'no_such_kind'; expected one of:"),
        ({"num_kv_heads": 3}, "num_kv_heads"),
        ({"query_type": "Self"}, "unknown query_type"),
        ({"score": ["dot", "dot"]}, "num_heads=4 scores, got 2"),
        ({"dropout": 1.0}, "dropout"),
    ],
)
def test_bad_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MultiHeadAttention(E, H, **kwargs)
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(10, 4)
    assert "exact" in kind_names()


def test_own_head_sizes_do_not_need_divisibility():
    mha = MultiHeadAttention(10, 4, head_dim_k=3, head_dim_v=2, batch_first=True)
    out, weights = mha(torch.randn(2, L, 10), torch.randn(2, S, 10), torch.randn(2, S, 10))
    assert out.shape == (2, L, 10) and weights.shape == (2, L, S)


def test_bad_input():
    mha = MultiHeadAttention(E, H, batch_first=True)
    x = torch.randn(N, L, E)
    with pytest.raises(ValueError, match=r"query must have 16 features.*\(3, 5, 8\)"):
        mha(torch.randn(N, L, 8), x, x)
    with pytest.raises(ValueError, match=r"all be 3-D \(batched\)"):
        mha(x, x[0], x[0])
    with pytest.raises(ValueError, match="batch size"):
        mha(x, x[:2], x[:2])
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(3, 5\)"):
        mha(x, x, x, key_padding_mask=torch.zeros(N, L + 1, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"attn_mask must have shape \(5, 5\) or \(12, 5, 5\)"):
        mha(x, x, x, attn_mask=torch.zeros(N, L, L, dtype=torch.bool))
    with pytest.raises(TypeError, match="attn_mask must be bool"):
        mha(x, x, x, attn_mask=torch.zeros(L, L, dtype=torch.long))
    with pytest.raises(TypeError, match=r"query must be a torch\.Tensor"):
        mha([1.0], x, x)
