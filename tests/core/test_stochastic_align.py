"""Stochastic alignments: hard (Xu et al., eq. 26) and reinforced (Shen et al. 2018), §3.2.2.

Checked through the alignment objects directly and through ``ak.attention`` (``log_prob``), with
fixed seeds; distributions are checked by frequencies over many draws.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from attention_cases import attend, backends_taking, grads, on_meta, qkv, randn, with_backends
from torch import Tensor

import attnkit as ak

# chi-square critical values at p = 0.001 by degrees of freedom (a fixed seed makes the test
# deterministic; the level only says how surprising a failure would be)
CHI2_CRITICAL_0_001 = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52}


def chi_square(counts: Tensor, probs: Tensor) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def one_hot(index: Tensor, n: int, dtype=torch.float64) -> Tensor:
    return F.one_hot(index, n).to(dtype)


# --- Hard: evaluation mode ------------------------------------------------------------------------


def hard_backends(estimator: str = "reinforce", return_weights: bool = False) -> list[str]:
    """The backends whose declaration takes the hard alignment (with weights if asked)."""
    align = ak.align.Hard(estimator=estimator)
    return backends_taking(dtype=torch.float64, align=align, return_weights=return_weights)


@pytest.mark.parametrize("backend", hard_backends(return_weights=True))
def test_hard_eval_is_the_argmax_one_hot(backend: str) -> None:
    q, k, v = qkv(m=5, n=7, d=4, dv=3, dtype=torch.float64, seed=30)
    mask = torch.rand(2, 1, 5, 7, generator=torch.Generator().manual_seed(31)) < 0.6
    mask[..., 3] = True
    align = ak.align.Hard().eval()
    out = attend(backend, q, k, v, align=align, mask=mask, return_weights=True)
    e = (q @ k.transpose(-2, -1) / 2.0).masked_fill(~mask, float("-inf"))  # scaled_dot, d = 4
    best = e.argmax(-1)
    assert torch.equal(out.weights, one_hot(best, 7))
    chosen_values = v.gather(2, best.unsqueeze(-1).expand(2, 2, 5, 3))
    assert torch.equal(out.context, chosen_values)
    assert out.log_prob is not None
    expected_log_prob = torch.log_softmax(e, -1).gather(-1, best.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(out.log_prob, expected_log_prob)


def test_hard_eval_directly() -> None:
    e = randn(6, 5, seed=32, dtype=torch.float64)
    mask = torch.tensor([[True, False, True, True, False]]).expand(6, 5)
    align = ak.align.Hard().eval()
    weights, log_prob = align.sample(e, mask)
    best = e.masked_fill(~mask, float("-inf")).argmax(-1)
    assert torch.equal(weights, one_hot(best, 5))
    assert torch.equal(align(e, mask), weights)
    torch.testing.assert_close(
        log_prob, torch.log_softmax(e.masked_fill(~mask, float("-inf")), -1)[range(6), best]
    )


# --- Hard: REINFORCE ------------------------------------------------------------------------------


def test_hard_reinforce_samples_follow_the_softmax() -> None:
    draws = 20_000
    scores = torch.tensor([0.5, -1.0, 1.5, 0.0], dtype=torch.float64)
    e = scores.expand(draws, 4)
    align = ak.align.Hard(estimator="reinforce").train()
    torch.manual_seed(33)
    weights, _ = align.sample(e)
    assert torch.equal(weights.sum(-1), torch.ones(draws, dtype=torch.float64))
    assert ((weights == 0) | (weights == 1)).all()
    counts = weights.sum(0)
    assert chi_square(counts, torch.softmax(scores, -1)) < CHI2_CRITICAL_0_001[3]


@pytest.mark.parametrize("backend", hard_backends())
def test_hard_reinforce_samples_follow_the_softmax_through_attention(backend: str) -> None:
    """Many identical queries: the keys they pick are drawn from one softmax distribution."""
    draws = 20_000
    q = randn(1, 1, 4, seed=34).expand(1, draws, 4)
    k = randn(1, 3, 4, seed=35)
    v = torch.eye(3).unsqueeze(0)  # context = the one-hot weights
    align = ak.align.Hard().train()
    torch.manual_seed(36)
    out = attend(backend, q, k, v, align=align)
    counts = out.context[0].sum(0)
    probs = torch.softmax((q[0, :1] @ k[0].T / 2.0).squeeze(0), -1)
    assert chi_square(counts.double(), probs.double()) < CHI2_CRITICAL_0_001[2]


def test_hard_reinforce_log_prob_and_its_gradient() -> None:
    e = randn(50, 6, seed=37, dtype=torch.float64).requires_grad_()
    align = ak.align.Hard().train()
    torch.manual_seed(38)
    weights, log_prob = align.sample(e)
    choice = weights.argmax(-1)
    log_p = torch.log_softmax(e.detach(), -1)
    torch.testing.assert_close(log_prob.detach(), log_p[range(50), choice])
    # log a_m has gradient onehot(m) - softmax(e) with respect to the scores
    (grad,) = torch.autograd.grad(log_prob.sum(), e)
    torch.testing.assert_close(grad, one_hot(choice, 6) - torch.softmax(e.detach(), -1))
    # the one-hot weights carry no gradient
    assert not weights.requires_grad or torch.equal(
        grads(weights.sum(), (e,))[0], torch.zeros_like(e)
    )


@pytest.mark.parametrize("backend", hard_backends(return_weights=True))
def test_hard_reinforce_through_attention(backend: str) -> None:
    q, k, v = qkv(m=4, n=6, dtype=torch.float64, seed=39, requires_grad=True)
    align = ak.align.Hard().train()
    torch.manual_seed(40)
    out = attend(backend, q, k, v, align=align, return_weights=True)
    assert out.log_prob is not None
    assert out.log_prob.shape == (2, 2, 4)
    choice = out.weights.argmax(-1)
    e = q.detach() @ k.detach().transpose(-2, -1) / 2.0
    expected = torch.log_softmax(e, -1).gather(-1, choice.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(out.log_prob.detach(), expected)
    # the context is v at the sampled key and does not carry gradient to q or k
    grad_q, grad_k, _ = grads(out.context.sum(), (q, k, v))
    assert torch.equal(grad_q, torch.zeros_like(q))
    assert torch.equal(grad_k, torch.zeros_like(k))
    # log_prob does
    grad_q, _, _ = grads(out.log_prob.sum(), (q, k, v))
    assert grad_q.abs().sum() > 0


def test_reinforce_loss_and_moving_average_baseline() -> None:
    q, k, v = qkv(b=3, h=2, m=4, n=5, dtype=torch.float64, seed=41, requires_grad=True)
    decay = 0.8
    align = ak.align.Hard(baseline_decay=decay).double().train()
    align.baseline.fill_(0.3)
    torch.manual_seed(42)
    out = ak.attention(q, k, v, align=align)
    reward = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64, requires_grad=True)
    loss = align.reinforce_loss(out.log_prob, reward)
    expected = -((reward.detach().view(3, 1, 1) - 0.3) * out.log_prob).mean()
    torch.testing.assert_close(loss, expected)
    assert align.baseline.item() == pytest.approx(decay * 0.3 + (1 - decay) * (-0.5 / 3))
    grad_q, _, _, grad_reward = grads(loss, (q, k, v, reward))
    assert grad_q.abs().sum() > 0  # trains the scores
    assert torch.equal(grad_reward, torch.zeros_like(reward))  # the reward is not differentiated
    # a second call uses the updated baseline
    baseline = align.baseline.item()
    again = align.reinforce_loss(out.log_prob, reward)
    torch.testing.assert_close(
        again, -((reward.detach().view(3, 1, 1) - baseline) * out.log_prob).mean()
    )


def test_reinforce_loss_with_a_reward_per_query() -> None:
    align = ak.align.Hard(baseline_decay=0.5).train()
    log_prob = randn(2, 3, seed=43)
    reward = randn(2, 3, seed=44)
    loss = align.reinforce_loss(log_prob, reward)
    torch.testing.assert_close(loss, -(reward * log_prob).mean())
    assert align.baseline.item() == pytest.approx(0.5 * reward.mean().item(), rel=1e-6)


# --- Hard: straight-through Gumbel-softmax --------------------------------------------------------


def test_hard_straight_through_forward_one_hot_backward_gumbel_softmax() -> None:
    """Same seed, same Gumbel noise ``-log(-log(u))``, ``u = rand_like(e)``: the weights are the
    one-hot argmax of the relaxation and their gradient is the relaxation's (Jang et al. 2017)."""
    temperature = 0.7
    e = randn(40, 5, seed=45, dtype=torch.float64).requires_grad_()
    align = ak.align.Hard(estimator="straight_through", temperature=temperature).train()
    torch.manual_seed(46)
    weights, log_prob = align.sample(e)
    torch.manual_seed(46)
    u = torch.rand_like(e)
    relaxed = torch.softmax((e + -torch.log(-torch.log(u))) / temperature, -1)

    assert torch.isfinite(weights).all()
    choice = relaxed.argmax(-1)
    torch.testing.assert_close(weights.detach(), one_hot(choice, 5), rtol=0, atol=1e-12)
    torch.testing.assert_close(
        log_prob.detach(), torch.log_softmax(e.detach(), -1)[range(40), choice]
    )
    upstream = randn(40, 5, seed=47, dtype=torch.float64)
    (grad,) = torch.autograd.grad((weights * upstream).sum(), e)
    (expected,) = torch.autograd.grad((relaxed * upstream).sum(), e)
    torch.testing.assert_close(grad, expected)


@pytest.mark.parametrize("backend", hard_backends("straight_through", return_weights=True))
def test_hard_straight_through_through_attention(backend: str) -> None:
    q, k, v = qkv(m=5, n=6, dtype=torch.float64, seed=48, requires_grad=True)
    align = ak.align.Hard(estimator="straight_through").train()
    torch.manual_seed(49)
    out = attend(backend, q, k, v, align=align, return_weights=True)
    assert torch.isfinite(out.weights).all()
    choice = out.weights.argmax(-1)
    torch.testing.assert_close(out.weights.detach(), one_hot(choice, 6), rtol=0, atol=1e-12)
    chosen = v.detach().gather(2, choice.unsqueeze(-1).expand(2, 2, 5, 3))
    torch.testing.assert_close(out.context.detach(), chosen, rtol=0, atol=1e-12)
    upstream = randn(2, 2, 5, 3, seed=50, dtype=torch.float64)
    grad_q, _, _ = grads((out.context * upstream).sum(), (q, k, v))
    assert torch.isfinite(grad_q).all()
    assert grad_q.abs().sum() > 0  # unlike REINFORCE, the scores get a (relaxed) gradient


# --- Hard: masks and seeds ------------------------------------------------------------------------


@pytest.mark.parametrize("estimator", ["reinforce", "straight_through"])
def test_hard_never_samples_a_masked_key(estimator: str) -> None:
    draws = 5_000
    e = randn(draws, 6, seed=51, dtype=torch.float64) * 3
    mask = torch.rand(draws, 6, generator=torch.Generator().manual_seed(52)) < 0.5
    mask[:, 2] |= ~mask.any(-1)  # every row keeps a key
    align = ak.align.Hard(estimator=estimator).train()
    torch.manual_seed(53)
    weights, log_prob = align.sample(e, mask)
    assert torch.isfinite(weights).all()
    assert torch.equal(weights[~mask], torch.zeros_like(weights[~mask]))
    choice = weights.argmax(-1)
    assert mask[torch.arange(draws), choice].all()
    assert torch.isfinite(log_prob).all()


@pytest.mark.parametrize("estimator", ["reinforce", "straight_through"])
def test_hard_sampling_is_reproducible_with_a_seed(estimator: str) -> None:
    e = randn(200, 5, seed=54)
    align = ak.align.Hard(estimator=estimator).train()
    torch.manual_seed(55)
    first = align.sample(e)[0]
    torch.manual_seed(55)
    second = align.sample(e)[0]
    torch.manual_seed(56)
    other = align.sample(e)[0]
    assert torch.equal(first, second)
    assert not torch.equal(first.argmax(-1), other.argmax(-1))


@pytest.mark.parametrize("backend", hard_backends())
def test_hard_through_attention_is_reproducible_with_a_seed(backend: str) -> None:
    q, k, v = qkv(m=30, n=6, seed=57)
    align = ak.align.Hard().train()
    torch.manual_seed(58)
    first = attend(backend, q, k, v, align=align)
    torch.manual_seed(58)
    second = attend(backend, q, k, v, align=align)
    torch.manual_seed(59)
    other = attend(backend, q, k, v, align=align)
    assert torch.equal(first.context, second.context)
    assert torch.equal(first.log_prob, second.log_prob)
    assert not torch.equal(first.context, other.context)


# --- Reinforced -----------------------------------------------------------------------------------


def _reinforced(d: int = 4, seed: int = 60) -> ak.align.Reinforced:
    torch.manual_seed(seed)
    return ak.align.Reinforced(d, d).double()


def _softmax_over(e: Tensor, keep: Tensor) -> Tensor:
    w = torch.softmax(e.masked_fill(~keep, float("-inf")), -1)
    return w.nan_to_num(0.0)


def test_reinforced_eval_keeps_keys_the_policy_favours() -> None:
    align = _reinforced().eval()
    query, key = (
        randn(3, 7, 4, seed=61, dtype=torch.float64),
        randn(3, 6, 4, seed=62, dtype=torch.float64),
    )
    e = randn(3, 7, 6, seed=63, dtype=torch.float64)
    mask = torch.rand(3, 7, 6, generator=torch.Generator().manual_seed(64)) < 0.7
    weights, log_prob = align.sample(e, mask, query=query, key=key)
    with torch.no_grad():
        logits = align.policy(query, key)
    kept = (torch.sigmoid(logits) > 0.5) & mask
    fallback = ~kept.any(-1, keepdim=True)
    kept = torch.where(fallback, mask, kept)
    torch.testing.assert_close(weights, _softmax_over(e, kept))
    assert torch.equal(weights > 0, kept)
    chosen = logits > 0
    expected = torch.where(chosen, F.logsigmoid(logits), F.logsigmoid(-logits))
    torch.testing.assert_close(log_prob.detach(), (expected * mask).sum(-1))


def test_reinforced_falls_back_to_every_admissible_key() -> None:
    align = _reinforced().eval()
    with torch.no_grad():
        align.policy.out.weight.zero_()  # logits 0: sigmoid = 0.5, never > 0.5
    query, key = (
        randn(2, 3, 4, seed=65, dtype=torch.float64),
        randn(2, 5, 4, seed=66, dtype=torch.float64),
    )
    e = randn(2, 3, 5, seed=67, dtype=torch.float64)
    mask = torch.tensor([True, False, True, True, False]).expand(2, 3, 5)
    weights, _ = align.sample(e, mask, query=query, key=key)
    torch.testing.assert_close(weights, _softmax_over(e, mask))


def test_reinforced_training_samples_bernoulli() -> None:
    """Key l gets weight when z_l = 1, or when no key is kept (the fallback):
    P = p_l + prod_j (1 - p_j), with p = sigmoid(policy)."""
    draws = 20_000
    align = _reinforced().train()
    query = randn(1, 4, seed=68, dtype=torch.float64).expand(draws, 4)
    key = randn(4, 4, seed=69, dtype=torch.float64)
    e = torch.zeros(draws, 4, dtype=torch.float64)
    torch.manual_seed(70)
    weights, _ = align.sample(e, None, query=query, key=key)
    with torch.no_grad():
        p = torch.sigmoid(align.policy(query[:1], key))[0]
    expected = p + (1 - p).prod()
    observed = (weights > 0).double().mean(0)
    sigma = (expected * (1 - expected) / draws).sqrt()
    assert ((observed - expected).abs() <= 5 * sigma).all(), (observed, expected)


def test_reinforced_training_log_prob() -> None:
    """log_prob = sum over admissible keys of log P(z_l); z is read back from the weights."""
    draws = 400
    align = _reinforced().train()
    query = randn(draws, 4, seed=71, dtype=torch.float64)
    key = randn(5, 4, seed=72, dtype=torch.float64)
    e = randn(draws, 5, seed=73, dtype=torch.float64)
    mask = torch.rand(draws, 5, generator=torch.Generator().manual_seed(74)) < 0.7
    torch.manual_seed(75)
    weights, log_prob = align.sample(e, mask, query=query, key=key)
    logits = align.policy(query, key).detach()
    log_keep, log_drop = F.logsigmoid(logits), F.logsigmoid(-logits)
    z = weights > 0
    with_z = (torch.where(z, log_keep, log_drop) * mask).sum(-1)
    nothing_kept = (log_drop * mask).sum(-1)  # the fallback case: z = 0 on every admissible key
    everything = z == mask
    ambiguous = everything.all(-1)  # all admissible keys weighted: all kept, or none kept
    lp = log_prob.detach()
    torch.testing.assert_close(lp[~ambiguous], with_z[~ambiguous])
    close_to_all = (lp[ambiguous] - with_z[ambiguous]).abs() < 1e-9
    close_to_none = (lp[ambiguous] - nothing_kept[ambiguous]).abs() < 1e-9
    assert (close_to_all | close_to_none).all()
    assert (~ambiguous).sum() > draws // 2  # the check above is not vacuous
    # log_prob trains the policy
    loss = align.reinforce_loss(log_prob, randn(draws, seed=76, dtype=torch.float64))
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in align.policy.parameters())


def test_reinforced_never_weights_a_masked_key() -> None:
    draws = 3_000
    align = _reinforced().train()
    query = randn(draws, 4, seed=77, dtype=torch.float64)
    key = randn(6, 4, seed=78, dtype=torch.float64)
    e = randn(draws, 6, seed=79, dtype=torch.float64)
    mask = torch.rand(draws, 6, generator=torch.Generator().manual_seed(80)) < 0.5
    torch.manual_seed(81)
    weights, log_prob = align.sample(e, mask, query=query, key=key)
    assert torch.equal(weights[~mask], torch.zeros_like(weights[~mask]))
    has_key = mask.any(-1)
    torch.testing.assert_close(
        weights.sum(-1)[has_key], torch.ones(int(has_key.sum()), dtype=torch.float64)
    )
    assert torch.equal(weights[~has_key], torch.zeros_like(weights[~has_key]))
    assert torch.isfinite(log_prob).all()


@pytest.mark.parametrize(
    ("training", "backend"),
    with_backends(
        [False, True],
        lambda training, backend: (
            backend
            in backends_taking(
                dtype=torch.float64,
                align=on_meta(lambda: ak.align.Reinforced(4, 4).train(training)),
                return_weights=True,
            )
        ),
    ),
)
def test_reinforced_through_attention(backend: str, training: bool) -> None:
    q, k, v = qkv(b=2, h=2, m=5, n=6, d=4, dtype=torch.float64, seed=82)
    align = _reinforced().train(training)
    pad = ak.masks.padding([6, 3], 6)
    torch.manual_seed(83)
    out = attend(backend, q, k, v, align=align, mask=pad, return_weights=True)
    assert out.log_prob is not None
    assert out.log_prob.shape == (2, 2, 5)
    assert torch.isfinite(out.log_prob).all()
    assert torch.equal(out.weights[1, :, :, 3:], torch.zeros(2, 5, 3, dtype=torch.float64))
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(2, 2, 5, dtype=torch.float64))
    if not training:
        logits = align.policy(q, k).detach()
        chosen = logits > 0
        per_key = torch.where(chosen, F.logsigmoid(logits), F.logsigmoid(-logits))
        torch.testing.assert_close(out.log_prob.detach(), (per_key * pad).sum(-1))
    torch.manual_seed(83)
    again = attend(backend, q, k, v, align=align, mask=pad, return_weights=True)
    assert torch.equal(again.weights, out.weights)


def test_stochastic_alignments_declare_themselves() -> None:
    assert ak.align.Hard.stochastic and ak.align.Reinforced.stochastic
    assert not ak.align.Softmax.stochastic
    assert math.isclose(ak.align.Hard().baseline.item(), 0.0)
