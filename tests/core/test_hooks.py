"""Attention hooks (attnkit.core.hooks): scoped per context, nested, attributed to modules.

Each hook's effect is checked against an independent computation: the float64 formula of eq. (2)-(4)
or the same model run without hooks.
"""

from __future__ import annotations

import dataclasses
import threading

import pytest
import torch
from torch import nn

import attnkit as ak
from attnkit.core.hooks import observed
from attnkit.interpret import record
from attnkit.layers import exact_kinds


def formula(q, k, v):
    """Softmax attention in float64, eq. (2)-(4), scaled dot product."""
    q, k, v = q.double(), k.double(), v.double()
    a = (q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5).softmax(-1)
    return a @ v, a


class Block(nn.Module):
    """Two named attention modules and an attention call outside both."""

    def __init__(self) -> None:
        super().__init__()
        self.first = ak.MultiHeadAttention(8, 2, batch_first=True)
        self.second = ak.MultiHeadAttention(8, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.first(x, x, x, need_weights=False)[0]
        x = ak.attention(x, x, x).context  # made by the block itself
        return self.second(x, x, x, need_weights=False)[0]


def test_scope_is_entered_and_restored_also_on_error():
    def identity(call, module, run):
        return run(call)

    assert not observed()
    with ak.attention_hooks(identity):
        assert observed()
        with ak.attention_hooks(identity):
            assert observed()
        assert observed()
    assert not observed()
    with pytest.raises(RuntimeError, match="boom"), ak.attention_hooks(identity):
        raise RuntimeError("boom")
    assert not observed()


def test_a_hook_sees_the_validated_call_and_its_result_is_returned():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 7, 4), torch.randn(2, 3, 7, 6)
    seen = []

    def with_weights(call, module, run):
        seen.append((module, call.shape, run.chosen.name))
        # the same call asking for its weights, on the reference backend
        out = run(dataclasses.replace(call, return_weights=True), "reference")
        return out

    with ak.attention_hooks(with_weights):
        out = ak.attention(q, k, v)
    assert seen == [(None, (2, 3, 5, 7), "sdpa")]
    context, weights = formula(q, k, v)
    torch.testing.assert_close(out.context.double(), context, atol=1e-6, rtol=0)
    torch.testing.assert_close(out.weights.double(), weights, atol=1e-6, rtol=0)


def test_a_hook_can_replace_the_output():
    q = torch.randn(1, 4, 3)

    def zero(call, module, run):
        out = run(call)
        return dataclasses.replace(out, context=torch.zeros_like(out.context))

    with ak.attention_hooks(zero):
        assert ak.attention(q, q, q).context.abs().sum() == 0
    assert ak.attention(q, q, q).context.abs().sum() > 0


def test_the_hook_entered_last_is_outermost():
    order = []

    def named(label):
        def hook(call, module, run):
            order.append(f"enter {label}")
            out = run(call)
            order.append(f"leave {label}")
            return out

        return hook

    q = torch.randn(1, 2, 3)
    with ak.attention_hooks(named("a"), named("b")), ak.attention_hooks(named("c")):
        ak.attention(q, q, q)
    assert order == ["enter c", "enter b", "enter a", "leave a", "leave b", "leave c"]


def test_calls_are_attributed_to_the_innermost_watched_module():
    torch.manual_seed(1)
    model, x = Block(), torch.randn(2, 5, 8)
    names = []

    def spy(call, module, run):
        names.append(module)
        return run(call)

    with ak.attention_hooks(spy, model=model):
        model(x)
    assert names == ["first", "", "second"]  # the block's own call is the model's, named ""
    names.clear()
    with ak.attention_hooks(spy, model=model, modules=["second"]):
        model(x)
    assert names == ["second"]  # calls outside the watched modules do not reach the hook
    names.clear()
    model(x)  # the scope ended: its module hooks were removed
    assert names == []


def test_two_threads_one_recording_do_not_see_each_others_calls():
    torch.manual_seed(2)
    model, x = Block().eval(), torch.randn(2, 5, 8)
    expected = model(x).detach()
    rounds = 20
    start = threading.Barrier(2)
    results: dict[str, object] = {}

    def recording() -> None:
        # recording and a uniform ablation: the ablation would show in the other thread's
        # outputs if the scopes leaked there
        with record(model) as rec, ak.evaluate.ablate(model, "uniform"):
            start.wait()
            results["ablated"] = [model(x).detach() for _ in range(rounds)]
        results["recorded"] = {name: len(calls) for name, calls in rec.weights.items()}

    def plain() -> None:
        start.wait()
        results["plain"] = [model(x).detach() for _ in range(rounds * 2)]
        results["observed"] = observed()

    threads = [threading.Thread(target=recording), threading.Thread(target=plain)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # only the recording thread's 20 forwards, each with one call per attention
    assert results["recorded"] == {"first": rounds, "": rounds, "second": rounds}
    assert results["observed"] is False
    # concurrent threads may round differently in the last bit (intra-op scheduling)
    for out in results["plain"]:
        torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
    for out in results["ablated"]:
        assert (out - expected).abs().max() > 1e-3


def test_exact_kinds_is_a_scope_of_its_context():
    torch.manual_seed(3)
    mha = ak.MultiHeadAttention(16, 2, batch_first=True, attention="linear").eval()
    x = torch.randn(2, 6, 16)
    linear = mha(x, x, x, need_weights=False)[0]
    exact = ak.MultiHeadAttention(16, 2, batch_first=True).eval()
    exact.load_state_dict(mha.state_dict())
    reference = exact(x, x, x, need_weights=False)[0]
    assert not torch.allclose(linear, reference, atol=1e-4)
    other: dict[str, torch.Tensor] = {}
    inside = threading.Event()
    done = threading.Event()

    def elsewhere() -> None:
        inside.wait()
        other["out"] = mha(x, x, x, need_weights=False)[0]
        done.set()

    thread = threading.Thread(target=elsewhere)
    thread.start()
    with exact_kinds(mha) as names:
        assert names == [""] and mha.forms_weights
        inside.set()
        done.wait()
        torch.testing.assert_close(mha(x, x, x, need_weights=False)[0], reference)
    thread.join()
    torch.testing.assert_close(other["out"], linear)  # the other thread kept the kind
    assert not mha.forms_weights
    torch.testing.assert_close(mha(x, x, x, need_weights=False)[0], linear)


def test_a_watched_module_without_weights_is_refused_in_one_line():
    mha = ak.MultiHeadAttention(16, 2, batch_first=True, attention="linear")
    x = torch.randn(1, 4, 16)
    with pytest.raises(ValueError, match="forms no attention weights"), record(mha):
        mha(x, x, x)
    with exact_kinds(mha), record(mha) as rec:
        mha(x, x, x)
    assert rec[""].shape == (1, 2, 4, 4)


def test_torch_attention_is_observed_without_replacing_its_forward():
    torch.manual_seed(4)
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(2, 5, 8)
    expected, _ = mha(x, x, x, need_weights=False)
    _, own = mha(x, x, x, average_attn_weights=False)
    with record(mha) as rec:
        assert "forward" not in vars(mha)
        got, _ = mha(x, x, x, need_weights=False)
    assert torch.equal(got, expected)  # torch's own output, bit for bit
    torch.testing.assert_close(rec[""], own, atol=1e-6, rtol=0)
    with ak.evaluate.ablate(mha, "uniform"):
        ablated, _ = mha(x, x, x, need_weights=False)
    # uniform weights: every query gets the mean of the values (eq. 4 with a = 1/N)
    w_v = mha.in_proj_weight[16:]
    values = x @ w_v.T + mha.in_proj_bias[16:]
    uniform = mha.out_proj(values.mean(1, keepdim=True).expand(-1, 5, -1))
    torch.testing.assert_close(ablated, uniform, atol=1e-5, rtol=0)
    assert not mha._forward_hooks and not mha._forward_pre_hooks


def test_bad_arguments():
    with pytest.raises(TypeError, match="hook must be callable"):
        with ak.attention_hooks("not a hook"):
            pass
    with pytest.raises(ValueError, match="pass model="):
        with ak.attention_hooks(lambda c, m, r: r(c), modules=["x"]):
            pass
    with pytest.raises(ValueError, match="no module of the model is named 'nope'"):
        with ak.attention_hooks(lambda c, m, r: r(c), model=Block(), modules=["nope"]):
            pass
