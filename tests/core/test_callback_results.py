"""What user callbacks give back to the engine is checked where it arrives: a ``score_mod`` that
returns ``None`` or scores of another shape, and an attention hook that returns something other
than an ``AttentionOutput``, are refused in one line naming the callback, what was expected and
what it returned (before, a ``score_mod`` returning ``None`` failed with ``'NoneType' object has
no attribute 'max'``, a wrong shape with a raw broadcast error, a hook with ``... has no
attribute 'context'``)."""

from __future__ import annotations

import re

import pytest
import torch

import attnkit as ak
from attnkit.core.engine import BACKENDS

# flex compiles only above its size threshold; tiled, chunked and reference run any call
MOD_BACKENDS = [None, *(b.name for b in BACKENDS if b.score_mod and b.name != "flex")]
EXPECTED = "score_mod(score, b, h, q_idx, kv_idx) must return a tensor of the score's shape"


def _qkv() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 6)


def _returns_none(score, b, h, q_idx, kv_idx):
    return None


def _returns_another_shape(score, b, h, q_idx, kv_idx):
    return torch.zeros(5, 7)


def _returns_a_number(score, b, h, q_idx, kv_idx):
    return 0.5


@pytest.mark.parametrize("backend", MOD_BACKENDS, ids=[str(b) for b in MOD_BACKENDS])
@pytest.mark.parametrize(
    ("mod", "given"),
    [
        (_returns_none, "got None"),
        (_returns_another_shape, "got a tensor of shape [5, 7]"),
        (_returns_a_number, "got a float"),
    ],
    ids=["None", "another shape", "a number"],
)
def test_a_score_mod_s_wrong_result_is_one_line_naming_it(backend, mod, given):
    q, k, v = _qkv()
    with pytest.raises(TypeError) as error:
        ak.attention(q, k, v, score_mod=mod, backend=backend)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(EXPECTED) and "[B, H, M, N] = [1, 2, 3, 5]" in message
    assert message.endswith(given)


@pytest.mark.parametrize("backend", MOD_BACKENDS, ids=[str(b) for b in MOD_BACKENDS])
def test_a_score_mod_result_that_broadcasts_is_that_value_at_every_score(backend):
    """A per-head bias returned as ``[1, H, 1, 1]`` means that bias at every score of the head
    (as FlexAttention applies a mod to each score alone): the float64 formula adds it."""
    q, k, v = _qkv()
    bias = torch.tensor([0.5, -1.0])

    def head_bias(score, b, h, q_idx, kv_idx):
        return score + bias[h]

    out = ak.attention(q, k, v, score_mod=head_bias, backend=backend).context
    qd, kd, vd = q.double(), k.double(), v.double()
    scores = qd @ kd.transpose(-1, -2) / 2.0 + bias.double().view(1, 2, 1, 1)
    torch.testing.assert_close(out.double(), scores.softmax(-1) @ vd, atol=1e-6, rtol=0)


def test_a_hook_returning_something_else_is_one_line_naming_the_hook():
    q, k, v = _qkv()

    def context_only(call, module, run):
        return run(call).context  # the tensor, not the AttentionOutput

    with ak.attention_hooks(context_only), pytest.raises(TypeError) as error:
        ak.attention(q, k, v)
    message = str(error.value)
    assert "\n" not in message
    assert re.fullmatch(
        r"the attention hook \S*context_only must return an AttentionOutput \(what its "
        r"run\(call\) returns\), got a tensor of shape \[1, 2, 3, 6\]",
        message,
    ), message
