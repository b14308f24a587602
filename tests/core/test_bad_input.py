"""One test per bad input (RELIABILITY.md, "Bad input"): the error type and a message that names
what was given, raised before any computation."""

from __future__ import annotations

import re

import pytest
import torch

import attnkit as ak
from attnkit.core.call import prepare
from attnkit.core.engine import BACKENDS


def r(*shape: int, **kwargs) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)), **kwargs)


class SpyScore(ak.scores.Dot):
    """A dot-product score that counts how often any of its computing methods runs."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0


def _counting(name: str):
    def method(self, *args, **kwargs):
        self.calls += 1
        return getattr(super(SpyScore, self), name)(*args, **kwargs)

    return method


for _name in ("forward", "forward_block", "features", "pairwise"):
    if hasattr(ak.scores.Dot, _name):
        setattr(SpyScore, _name, _counting(_name))


def test_the_spy_score_sees_a_computation() -> None:
    """Control for the ``spy.calls == 0`` checks below."""
    spy = SpyScore()
    out = ak.attention(r(2, 3, 4), r(2, 5, 4), r(2, 5, 4), score=spy)
    assert out.context.shape == (2, 3, 4)
    assert spy.calls > 0


def raises(error: type[Exception], *fragments: str):
    """``pytest.raises`` whose message must contain every fragment literally (in order)."""
    return pytest.raises(error, match=".*".join(re.escape(f) for f in fragments))


def shape(*dims: int) -> str:
    return str(tuple(dims))


# --- tensor shapes, dtypes, devices ---------------------------------------------------------------


@pytest.mark.parametrize("score", ["dot", "scaled_dot", "cosine", "euclidean"])
def test_query_key_feature_sizes_differ(score: str) -> None:
    with raises(ValueError, score, "d_q=4", "d_k=6"):
        ak.attention(r(2, 3, 4), r(2, 5, 6), r(2, 5, 6), score=score)


@pytest.mark.parametrize("score", ["dot", "scaled_dot", "cosine", "euclidean"])
def test_query_key_feature_sizes_differ_4d(score: str) -> None:
    with raises(ValueError, score, "d_q=8", "d_k=3"):
        ak.attention(r(1, 2, 3, 8), r(1, 2, 5, 3), r(1, 2, 5, 3), score=score)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: ak.scores.Additive(5, 6, 8), ("additive", "d_q=5", "d_q=4")),
        (lambda: ak.scores.Additive(4, 7, 8), ("additive", "d_k=7", "d_k=6")),
        (lambda: ak.scores.General(4, 7), ("general", "d_k=7", "d_k=6")),
        (lambda: ak.scores.BiasedGeneral(9, 6), ("biased_general", "d_q=9", "d_q=4")),
        (lambda: ak.scores.ActivatedGeneral(3, 6), ("activated_general", "d_q=3", "d_q=4")),
        (lambda: ak.scores.Location(7, 10), ("location", "d_q=7", "d_q=4")),
    ],
    ids=["additive-q", "additive-k", "general", "biased_general", "activated_general", "location"],
)
def test_parametric_score_built_for_other_sizes(make, expected) -> None:
    with raises(ValueError, *expected):
        ak.attention(r(2, 3, 4), r(2, 5, 6), r(2, 5, 6), score=make())


def test_key_value_lengths_differ() -> None:
    spy = SpyScore()
    with raises(ValueError, shape(2, 5, 4), shape(2, 6, 4)):
        ak.attention(r(2, 3, 4), r(2, 5, 4), r(2, 6, 4), score=spy)
    assert spy.calls == 0


@pytest.mark.parametrize("odd", ["q", "k", "v"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_dtypes_differ(odd: str, dtype: torch.dtype) -> None:
    tensors = {"q": r(2, 3, 4), "k": r(2, 5, 4), "v": r(2, 5, 4)}
    tensors[odd] = tensors[odd].to(dtype)
    spy = SpyScore()
    with raises(TypeError, str(dtype)) as info:
        ak.attention(tensors["q"], tensors["k"], tensors["v"], score=spy)
    assert "torch.float32" in str(info.value)
    assert spy.calls == 0


@pytest.mark.parametrize("name", ["q", "k", "v"])
def test_integer_tensor(name: str) -> None:
    tensors = {"q": r(2, 3, 4), "k": r(2, 5, 4), "v": r(2, 5, 4)}
    tensors[name] = torch.ones(tensors[name].shape, dtype=torch.int64)
    with raises(TypeError, name, "torch.int64"):
        ak.attention(tensors["q"], tensors["k"], tensors["v"])


@pytest.mark.parametrize("odd", ["q", "k", "v"])
def test_devices_differ(odd: str) -> None:
    """No second device is needed: a tensor on the ``meta`` device must be refused up front."""
    tensors = {"q": r(2, 3, 4), "k": r(2, 5, 4), "v": r(2, 5, 4)}
    tensors[odd] = torch.empty(tensors[odd].shape, device="meta")
    spy = SpyScore()
    with raises(ValueError, "device") as info:
        ak.attention(tensors["q"], tensors["k"], tensors["v"], score=spy)
    assert "meta" in str(info.value)
    assert "cpu" in str(info.value)
    assert spy.calls == 0


def test_mask_on_another_device() -> None:
    """A mask that cannot be moved to the inputs' device is refused naming the mask and both
    devices (here a ``meta`` mask for cpu inputs), not by a PyTorch error deep in the call."""
    spy = SpyScore()
    mask = torch.ones(3, 5, dtype=torch.bool, device="meta")
    with pytest.raises((ValueError, TypeError), match="mask") as info:
        ak.attention(r(2, 3, 4), r(2, 5, 4), r(2, 5, 4), mask=mask, score=spy)
    assert "meta" in str(info.value)
    assert spy.calls == 0


def test_not_a_tensor() -> None:
    with raises(TypeError, "q", "list"):
        ak.attention([[1.0]], r(2, 5, 4), r(2, 5, 4))


@pytest.mark.parametrize(
    "shapes",
    [
        ((3, 4), (5, 4), (5, 4)),
        ((4,), (4,), (4,)),
        ((1, 2, 2, 3, 4), (1, 2, 2, 5, 4), (1, 2, 2, 5, 4)),
        ((2, 3, 4), (2, 1, 5, 4), (2, 1, 5, 4)),
    ],
    ids=["rank2", "rank1", "rank5", "mixed-3d-4d"],
)
def test_wrong_rank(shapes) -> None:
    spy = SpyScore()
    with raises(ValueError, *(str(s) for s in shapes)):
        ak.attention(*(r(*s) for s in shapes), score=spy)
    assert spy.calls == 0


def test_batch_sizes_differ() -> None:
    with raises(ValueError, "batch", shape(2, 3, 4), shape(3, 5, 4)):
        ak.attention(r(2, 3, 4), r(3, 5, 4), r(3, 5, 4))


def test_grouped_query_heads_do_not_divide() -> None:
    with raises(ValueError, shape(2, 3, 3, 4), shape(2, 2, 5, 4)):
        ak.attention(r(2, 3, 3, 4), r(2, 2, 5, 4), r(2, 2, 5, 4))


def test_key_and_value_heads_differ() -> None:
    with raises(ValueError, shape(2, 2, 5, 4), shape(2, 1, 5, 4)):
        ak.attention(r(2, 4, 3, 4), r(2, 2, 5, 4), r(2, 1, 5, 4))


def test_multi_dimensional_score_for_other_value_size() -> None:
    score = ak.scores.Additive(4, 4, 8, value_features=6)
    with raises(ValueError, "6", "d_v=5"):
        ak.attention(r(2, 3, 4), r(2, 3, 4), r(2, 3, 5), score=score)


# --- masks ----------------------------------------------------------------------------------------


def test_mask_not_broadcastable_3d() -> None:
    spy = SpyScore()
    with raises(ValueError, shape(3, 4), shape(2, 3, 5)):
        ak.attention(
            r(2, 3, 4), r(2, 5, 4), r(2, 5, 4), mask=torch.ones(3, 4, dtype=torch.bool), score=spy
        )
    assert spy.calls == 0


def test_mask_not_broadcastable_4d() -> None:
    with raises(ValueError, shape(2, 3, 3, 5), shape(2, 2, 3, 5)):
        ak.attention(
            r(2, 2, 3, 4),
            r(2, 2, 5, 4),
            r(2, 2, 5, 4),
            mask=torch.ones(2, 3, 3, 5, dtype=torch.bool),
        )


def test_mask_of_rank_5() -> None:
    with raises(ValueError, shape(1, 2, 2, 3, 5), shape(2, 2, 3, 5)):
        ak.attention(
            r(2, 2, 3, 4),
            r(2, 2, 5, 4),
            r(2, 2, 5, 4),
            mask=torch.ones(1, 2, 2, 3, 5, dtype=torch.bool),
        )


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_mask_of_integer_dtype(dtype: torch.dtype) -> None:
    spy = SpyScore()
    with raises(ValueError, "mask", str(dtype)):
        ak.attention(
            r(2, 3, 4), r(2, 5, 4), r(2, 5, 4), mask=torch.ones(3, 5, dtype=dtype), score=spy
        )
    assert spy.calls == 0


def test_mask_not_a_tensor() -> None:
    with raises(TypeError, "mask", "list"):
        ak.attention(r(2, 3, 4), r(2, 5, 4), r(2, 5, 4), mask=[[True] * 5] * 3)


def test_mask_mod_returning_non_bool() -> None:
    with raises(TypeError, "mask_mod", "bool"):
        ak.attention(r(2, 3, 4), r(2, 5, 4), r(2, 5, 4), mask_mod=lambda b, h, i, j: i - j)


@pytest.mark.parametrize("window", [0, -1, -5])
def test_sliding_window_not_positive(window: int) -> None:
    with raises(ValueError, "window", str(window)):
        ak.masks.sliding_window(3, 5, window)
    with raises(ValueError, "window", str(window)):
        ak.masks.sliding_window_mod(window)


def test_sliding_window_not_an_int() -> None:
    with raises(ValueError, "window", "1.5"):
        ak.masks.sliding_window(3, 5, 1.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("lengths", [[3, 6], [-1, 2]])
def test_padding_lengths_out_of_range(lengths: list[int]) -> None:
    with raises(ValueError, "[0, 5]", str(lengths)):
        ak.masks.padding(lengths, 5)


def test_padding_lengths_not_integers() -> None:
    with raises(ValueError, "torch.float32"):
        ak.masks.padding(torch.tensor([1.0, 2.0]), 5)
    with raises(ValueError, shape(1, 2)):
        ak.masks.padding(torch.tensor([[1, 2]]), 5)


# --- names and constructors -----------------------------------------------------------------------


def test_unknown_score_name_lists_the_valid_names() -> None:
    with pytest.raises(ValueError, match="bogus") as info:
        ak.attention(r(2, 3, 4), r(2, 5, 4), r(2, 5, 4), score="bogus")
    for name in ak.scores.SCORES.names():
        assert name in str(info.value)


def test_unknown_align_name_lists_the_valid_names() -> None:
    with pytest.raises(ValueError, match="bogus") as info:
        ak.attention(r(2, 3, 4), r(2, 5, 4), r(2, 5, 4), align="bogus")
    for name in ak.align.ALIGNS.names():
        assert name in str(info.value)


def test_score_of_wrong_type() -> None:
    with raises(TypeError, "score", "int"):
        ak.attention(r(2, 3, 4), r(2, 5, 4), r(2, 5, 4), score=3)  # type: ignore[arg-type]


PARAMETRIC_SCORES = [
    n for n in ak.scores.SCORES.names() if getattr(ak.scores.SCORES.get(n), "parametric", False)
]
PARAMETRIC_ALIGNS = [
    n for n in ak.align.ALIGNS.names() if getattr(ak.align.ALIGNS.get(n), "parametric", False)
]


def test_the_registries_have_parametric_entries() -> None:
    assert {"additive", "general", "location"} <= set(PARAMETRIC_SCORES)
    assert {"local_predictive", "reinforced"} <= set(PARAMETRIC_ALIGNS)


@pytest.mark.parametrize("name", [*PARAMETRIC_SCORES, "concat"])
def test_parametric_score_given_by_name(name: str) -> None:
    cls = ak.scores.SCORES.get(name)
    with raises(ValueError, name, f"ak.scores.{cls.__name__}"):
        ak.attention(r(2, 3, 4), r(2, 5, 4), r(2, 5, 4), score=name)


@pytest.mark.parametrize("name", PARAMETRIC_ALIGNS)
def test_parametric_align_given_by_name(name: str) -> None:
    cls = ak.align.ALIGNS.get(name)
    with raises(ValueError, name, f"ak.align.{cls.__name__}"):
        ak.attention(r(2, 3, 4), r(2, 5, 4), r(2, 5, 4), align=name)


@pytest.mark.parametrize("window", [0, -1])
def test_local_alignment_window_not_positive(window: int) -> None:
    with raises(ValueError, "window", str(window)):
        ak.align.LocalMonotonic(window)
    with raises(ValueError, "window", str(window)):
        ak.align.LocalPredictive(4, window)


def test_local_predictive_for_other_query_size() -> None:
    with raises(ValueError, "local_predictive", "6", shape(2, 1, 3, 4)):
        ak.attention(r(2, 3, 4), r(2, 5, 4), r(2, 5, 4), align=ak.align.LocalPredictive(6, 2))


@pytest.mark.parametrize("k", [0, -2])
def test_topk_not_positive(k: int) -> None:
    with raises(ValueError, "topk", str(k)):
        ak.align.TopK(k)


def test_hard_alignment_options() -> None:
    with raises(ValueError, "estimator", "gumbel"):
        ak.align.Hard(estimator="gumbel")  # type: ignore[arg-type]
    with raises(ValueError, "temperature", "0"):
        ak.align.Hard(estimator="straight_through", temperature=0)
    with raises(ValueError, "baseline_decay", "1.0"):
        ak.align.Hard(baseline_decay=1.0)


def test_cosine_temperature_not_positive() -> None:
    with raises(ValueError, "temperature", "0"):
        ak.scores.Cosine(temperature=0)


def test_location_score_with_more_keys_than_max_length() -> None:
    spy_free = ak.scores.Location(4, 9)
    with raises(ValueError, "location", "max_length=9", "10"):
        ak.attention(r(2, 3, 4), r(2, 10, 4), r(2, 10, 4), score=spy_free)


# --- options --------------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5])
def test_dropout_outside_unit_interval(p: float) -> None:
    with raises(ValueError, "dropout", "[0, 1)", repr(p)):
        ak.attention(r(2, 3, 4), r(2, 5, 4), r(2, 5, 4), dropout=p)


@pytest.mark.parametrize("p", [True, "0.1", None])
def test_dropout_not_a_number(p) -> None:
    with pytest.raises((ValueError, TypeError), match="dropout"):
        ak.attention(r(2, 3, 4), r(2, 5, 4), r(2, 5, 4), dropout=p)


def test_scale_not_a_number() -> None:
    with raises(TypeError, "scale", "str"):
        ak.attention(r(2, 3, 4), r(2, 5, 4), r(2, 5, 4), scale="x")  # type: ignore[arg-type]


def test_unknown_backend_lists_the_backends() -> None:
    with pytest.raises(ValueError, match="'flash'") as info:
        ak.attention(r(2, 3, 4), r(2, 5, 4), r(2, 5, 4), backend="flash")
    for backend in BACKENDS.values():
        assert backend.name in str(info.value)


def test_forcing_sdpa_when_weights_are_asked() -> None:
    with raises(ValueError, "'sdpa'", "weights"):
        ak.attention(r(2, 3, 4), r(2, 5, 4), r(2, 5, 4), return_weights=True, backend="sdpa")


def _refusable_calls():
    """Calls that some backend may not be able to run."""
    q, k, v = r(2, 3, 4), r(2, 5, 4), r(2, 5, 4)
    yield "weights", q, k, v, {"return_weights": True}
    yield "sparsemax", q, k, v, {"align": "sparsemax"}
    yield "euclidean", q, k, v, {"score": "euclidean"}
    yield "additive", q, k, v, {"score": ak.scores.Additive(4, 4, 5)}
    yield "score_mod", q, k, v, {"score_mod": lambda s, b, h, i, j: s * 0.5}
    yield "dropout", q, k, v, {"dropout": 0.25}
    yield (
        "everything",
        q,
        k,
        v,
        {
            "align": "sparsemax",
            "score": "euclidean",
            "return_weights": True,
            "dropout": 0.25,
            "score_mod": lambda s, b, h, i, j: s,
        },
    )


@pytest.mark.parametrize("backend", [b.name for b in BACKENDS.values()])
def test_forcing_a_backend_that_cannot_run_lists_its_reasons(backend: str) -> None:
    chosen = next(b for b in BACKENDS.values() if b.name == backend)
    refused = 0
    for _label, q, k, v, kwargs in _refusable_calls():
        reasons = chosen.reasons(prepare(q, k, v, **kwargs), forced=True)
        if not reasons:
            out = ak.attention(q, k, v, backend=backend, **kwargs)  # runs: nothing to refuse
            assert out.context.shape == (2, 3, 4)
            continue
        refused += 1
        with pytest.raises(ValueError, match=re.escape(repr(backend))) as info:
            ak.attention(q, k, v, backend=backend, **kwargs)
        for reason in reasons:
            assert reason in str(info.value)
    if backend == "sdpa":
        assert refused >= 3  # weights, sparsemax, score_mod at least


def test_some_backend_refuses_some_call() -> None:
    """Guards the test above: with nothing refused it would check nothing."""
    refused = [
        b.name
        for b in BACKENDS.values()
        for _label, q, k, v, kwargs in _refusable_calls()
        if b.reasons(prepare(q, k, v, **kwargs))
    ]
    assert refused
