"""``ak.GeneralAttention`` against the survey's general attention module, eq. (1)-(5), (30)-(32).

Float64 throughout, so the module must match the formulas of ``formulas.py`` to ~1e-10.
"""

from __future__ import annotations

import formulas as ref
import pytest
import torch
from test_reference import ALIGN_NAMES, SCORE_NAMES, make_align, reference_align, reference_score
from torch import Tensor, nn

import attnkit as ak
from attnkit.core.scores import SCORES

F64 = torch.float64
TOL = 1e-10
B, M, N = 3, 4, 6
D_Q, D_F, D_K, D_V = 5, 7, 4, 3


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: one thread is faster than OpenMP's parallel regions. Restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def close(x: Tensor, y: Tensor, tol: float = TOL) -> None:
    torch.testing.assert_close(x, y, rtol=0, atol=tol)


def expected(
    module: ak.GeneralAttention,
    score_name: str,
    align_name: str,
    query: Tensor,
    features: Tensor,
    padding: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Eq. (1)-(4) (or (30)-(32)) with the module's parameters: ``(context, weights)``."""
    W_K = getattr(module.key_proj, "weight", None)  # None: nn.Identity, i.e. W_K = I
    W_V = getattr(module.value_proj, "weight", None)
    K, V = ref.keys_values(features, _detach(W_K), _detach(W_V))  # eq. (1)
    score = reference_score(score_name, module.score, F64)
    align = reference_align(align_name, module.align, query, K, F64)
    allowed = None if padding is None else padding.unsqueeze(1)  # [B, 1, N]
    return ref.attention(query, K, V, score, align, allowed)


def _detach(t: Tensor | None) -> Tensor | None:
    return None if t is None else t.detach()


def inputs(seed: int, d_query: int = D_Q, d_feature: int = D_F) -> tuple[Tensor, Tensor]:
    torch.manual_seed(seed)
    return torch.randn(B, M, d_query, dtype=F64), torch.randn(B, N, d_feature, dtype=F64)


PADDING = torch.tensor([[True] * N, [True] * 4 + [False] * 2, [True] + [False] * (N - 1)])


def test_keys_and_values_are_learned_projections_of_the_features():
    """Eq. (1): ``K = W_K F``, ``V = W_V F`` with ``W_K [d_k, d_f]``, ``W_V [d_v, d_f]``."""
    query, features = inputs(0)
    module = ak.GeneralAttention(D_Q, D_F, d_key=D_K, d_value=D_V).double()
    assert module.key_proj.weight.shape == (D_K, D_F)
    assert module.value_proj.weight.shape == (D_V, D_F)
    out = module(query, features, return_weights=True)
    context, weights = expected(module, "additive", "softmax", query, features)
    assert out.context.shape == (B, M, D_V) and out.weights.shape == (B, M, N)
    close(out.context, context)
    close(out.weights, weights)


def test_identity_projections_when_sizes_are_not_given():
    """``W_K = W_V = I`` (the survey's example of predefined weights): keys = values = F."""
    query, features = inputs(1)
    module = ak.GeneralAttention(D_Q, D_F).double()
    assert not list(module.key_proj.parameters()) and not list(module.value_proj.parameters())
    out = module(query, features, return_weights=True)
    assert out.context.shape == (B, M, D_F)
    context, weights = expected(module, "additive", "softmax", query, features)
    close(out.context, context)
    close(out.weights, weights)
    # The context is then a convex combination of the feature vectors themselves.
    close(out.context, torch.einsum("bmn,bnf->bmf", out.weights, features))


def _score_spec(name: str) -> str | ak.scores.Score:
    # Location needs max_length, which the module cannot know: an object, as documented.
    return ak.scores.Location(D_Q, N) if name == "location" else name


@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "padded"])
@pytest.mark.parametrize("score_name", SCORE_NAMES)
def test_every_score_name(score_name: str, masked: bool):
    same_size = SCORES.get(score_name).same_size
    d_key = D_Q if same_size else D_K  # dot products and similarities need d_q == d_k
    query, features = inputs(2)
    torch.manual_seed(20)
    module = ak.GeneralAttention(
        D_Q, D_F, d_key=d_key, d_value=D_V, score=_score_spec(score_name)
    ).double()
    padding = PADDING if masked else None
    out = module(query, features, padding, return_weights=True)
    assert out.context.shape == (B, M, D_V) and out.weights.shape == (B, M, N)
    context, weights = expected(module, score_name, "softmax", query, features, padding)
    close(out.context, context)
    close(out.weights, weights)


@pytest.mark.parametrize("align_name", ALIGN_NAMES)
def test_every_alignment(align_name: str):
    """Names where the module can build them (reinforced gets its sizes from the module);
    local-predictive needs its window, so it is passed as an object."""
    query, features = inputs(3)
    torch.manual_seed(30)
    spec = make_align(align_name, D_Q, D_K) if align_name == "local_predictive" else align_name
    module = ak.GeneralAttention(D_Q, D_F, d_key=D_K, d_value=D_V, align=spec).double().eval()
    out = module(query, features, PADDING, return_weights=True)
    assert out.context.shape == (B, M, D_V) and out.weights.shape == (B, M, N)
    context, weights = expected(module, "additive", align_name, query, features, PADDING)
    close(out.context, context)
    close(out.weights, weights)


@pytest.mark.parametrize("align_name", ["softmax", "sparsemax", "local_monotonic"])
@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "padded"])
def test_multi_dimensional_attention(masked: bool, align_name: str):
    """Eq. (31) score vectors ``W_d^T act(W1 q + W2 k_l + b)``, eq. (32) alignment per feature
    over the keys, eq. (30) ``c = sum_l a_l ⊙ v_l``."""
    query, features = inputs(4)
    torch.manual_seed(40)
    module = ak.GeneralAttention(
        D_Q, D_F, d_key=D_K, d_value=D_V, align=align_name, multi_dimensional=True
    ).double()
    assert module.score.out.weight.shape == (D_V, D_K), "W_d [d_w, d_v] (stored transposed)"
    padding = PADDING if masked else None
    out = module(query, features, padding, return_weights=True)
    assert out.weights.shape == (B, M, N, D_V)
    context, weights = expected(module, "additive", align_name, query, features, padding)
    close(out.context, context)
    close(out.weights, weights)
    if align_name == "softmax":
        # Each feature's weights sum to 1 over the admissible keys (eq. 32).
        sums = out.weights.sum(-2)
        close(sums[PADDING.any(-1)], torch.ones_like(sums[PADDING.any(-1)]))


def test_multi_dimensional_needs_the_additive_score():
    with pytest.raises(ValueError, match="additive"):
        ak.GeneralAttention(D_Q, D_F, d_key=D_Q, score="scaled_dot", multi_dimensional=True)


@pytest.mark.parametrize("multi_dimensional", [False, True])
def test_output_model(multi_dimensional: bool):
    """Eq. (5): ``y = softmax(W_c c + b_c)`` with ``W_c [d_y, d_v]``, ``b_c [d_y]``."""
    query, features = inputs(5)
    torch.manual_seed(50)
    module = ak.GeneralAttention(
        D_Q, D_F, d_key=D_K, d_value=D_V, d_output=4, multi_dimensional=multi_dimensional
    ).double()
    assert isinstance(module.output_model, nn.Linear)
    assert module.output_model.weight.shape == (4, D_V) and module.output_model.bias.shape == (4,)
    out = module(query, features, PADDING)
    context, _ = expected(module, "additive", "softmax", query, features, PADDING)
    y = ref.output_model(
        context, module.output_model.weight.detach(), module.output_model.bias.detach()
    )
    assert out.output.shape == (B, M, 4)
    close(out.output, y)
    close(out.output.sum(-1), torch.ones(B, M, dtype=F64))
    without = ak.GeneralAttention(D_Q, D_F).double()
    assert without.output_model is None and without(query, features).output is None


@pytest.mark.parametrize("multi_dimensional", [False, True])
def test_single_query(multi_dimensional: bool):
    """A query ``[B, d_q]`` gives ``context [B, d_v]``, weights ``[B, N]`` (``[B, N, d_v]``),
    equal to the same query as a length-1 sequence."""
    query, features = inputs(6)
    torch.manual_seed(60)
    module = ak.GeneralAttention(
        D_Q, D_F, d_key=D_K, d_value=D_V, d_output=2, multi_dimensional=multi_dimensional
    ).double()
    single = module(query[:, 0], features, PADDING, return_weights=True)
    sequence = module(query[:, :1], features, PADDING, return_weights=True)
    assert single.context.shape == (B, D_V)
    assert single.weights.shape == ((B, N, D_V) if multi_dimensional else (B, N))
    assert single.output.shape == (B, 2)
    close(single.context, sequence.context[:, 0])
    close(single.weights, sequence.weights[:, 0])
    close(single.output, sequence.output[:, 0])
    context, weights = expected(module, "additive", "softmax", query[:, :1], features, PADDING)
    close(single.context, context[:, 0])
    close(single.weights, weights[:, 0])


def test_key_padding_mask():
    """``mask [B, N]`` marks the real feature vectors: padded ones get exactly zero weight, and
    whatever they contain cannot change the result."""
    query, features = inputs(7)
    torch.manual_seed(70)
    module = ak.GeneralAttention(D_Q, D_F, d_key=D_K, d_value=D_V).double()
    out = module(query, features, PADDING, return_weights=True)
    assert (out.weights.permute(1, 0, 2)[:, ~PADDING] == 0).all()
    close(out.weights.sum(-1), torch.ones(B, M, dtype=F64))
    scrambled = torch.where(PADDING.unsqueeze(-1), features, 1e3 * torch.randn_like(features))
    again = module(query, scrambled, PADDING, return_weights=True)
    close(again.context, out.context, 1e-12)
    context, weights = expected(module, "additive", "softmax", query, features, PADDING)
    close(out.context, context)
    close(out.weights, weights)


def test_a_feature_set_with_no_real_vector_gives_zeros():
    query, features = inputs(8)
    module = ak.GeneralAttention(D_Q, D_F, d_key=D_K, d_value=D_V).double()
    nothing = torch.zeros(B, N, dtype=torch.bool)
    nothing[0] = True
    out = module(query, features, nothing, return_weights=True)
    assert torch.isfinite(out.context).all()
    assert (out.context[1:] == 0).all() and (out.weights[1:] == 0).all()


def test_dropout_only_in_training_mode():
    """Dropout on the attention weights (kept weights scaled by 1/(1-p)) in training mode only;
    the returned weights are the weights before dropout."""
    torch.manual_seed(9)
    p = 0.5
    # V = F = I (identity value projection, one-hot features): the context *is* the weight row.
    features = torch.eye(N, dtype=F64).expand(B, N, N)
    query = torch.randn(B, 40, D_Q, dtype=F64)
    module = ak.GeneralAttention(D_Q, N, d_key=D_K, dropout=p).double()
    evaluated = module.eval()(query, features, return_weights=True)
    close(evaluated.context, evaluated.weights)  # no dropout in eval mode
    reference = ak.GeneralAttention(D_Q, N, d_key=D_K, dropout=0.0).double()
    reference.load_state_dict(module.state_dict())
    close(evaluated.context, reference(query, features).context)

    torch.manual_seed(10)
    trained = module.train()(query, features, return_weights=True)
    close(trained.weights, evaluated.weights)  # weights are reported before dropout
    dropped = trained.context == 0
    kept = ~dropped
    close(trained.context[kept], evaluated.weights[kept] / (1 - p))
    fraction = dropped.double().mean().item()
    assert 0.35 < fraction < 0.65, f"about half of the weights dropped, got {fraction:.2f}"
    torch.manual_seed(10)
    again = module(query, features)
    assert torch.equal(again.context, trained.context), "reproducible with a seed"
