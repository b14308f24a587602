"""Soft and hard attention over CNN annotation vectors (Xu et al. 2015), against float64
formulas written from the paper: the soft context is the expectation Σ α_i a_i; the hard model
picks one location and its scorer learns only through the REINFORCE estimate (Xu eq. 12)."""

import pytest
import torch
import torch.nn.functional as F

from attnkit.evaluate import ablate
from attnkit.models.glimpse import GlimpseClassifier


def model_of(attention: str, **kwargs) -> GlimpseClassifier:
    torch.manual_seed(0)
    return GlimpseClassifier(1, 4, attention=attention, features=6, hidden_dim=5, **kwargs).double()


def hand_alpha(model: GlimpseClassifier, a: torch.Tensor) -> torch.Tensor:
    """α [B, L] from f_att written out: e_i = w^T tanh(W_q h + W_a a_i + b), h from mean(a)."""
    h = torch.tanh(a.mean(1) @ model.init_query.weight.T + model.init_query.bias)  # [B, d_h]
    s = model.score
    hidden = torch.tanh(
        (h @ s.query_proj.weight.T)[:, None, :] + a @ s.key_proj.weight.T + s.key_proj.bias
    )  # [B, L, d_w]
    e = (hidden @ s.out.weight.T).squeeze(-1)  # [B, L]
    return torch.softmax(e, -1)


def images(batch: int = 3) -> torch.Tensor:
    return torch.randn(
        batch, 1, 12, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
    )


def test_soft_context_is_the_expected_annotation():
    model = model_of("soft").eval()
    x = images()
    logits, weights, log_prob, a, _ = model.attend(x)
    assert a.shape == (3, 12, 6) and weights.shape == (3, 12) and log_prob is None
    alpha = hand_alpha(model, a.detach())
    torch.testing.assert_close(weights, alpha, rtol=1e-10, atol=1e-12)
    context = (alpha[:, :, None] * a).sum(1)  # ẑ = Σ_i α_i a_i (Xu eq. 13)
    torch.testing.assert_close(logits, model.output(context), rtol=1e-10, atol=1e-12)


def test_soft_objective_is_cross_entropy():
    model = model_of("soft")
    x, y = images(), torch.tensor([0, 3, 1])
    torch.testing.assert_close(model.objective({"images": x}, y), F.cross_entropy(model(x), y))


def test_hard_attention_takes_one_sampled_location_and_its_log_probability():
    model = model_of("hard").train()
    torch.manual_seed(5)
    logits, weights, log_prob, a, _ = model.attend(images())
    alpha = hand_alpha(model, a.detach())
    assert set(weights.unique().tolist()) <= {0.0, 1.0} and weights.sum(-1).tolist() == [1.0] * 3
    s = weights.argmax(-1)
    torch.testing.assert_close(log_prob, alpha.gather(1, s[:, None]).squeeze(1).log())
    chosen = a[torch.arange(3), s]  # ẑ = a_s
    torch.testing.assert_close(logits, model.output(chosen), rtol=1e-10, atol=1e-12)


def test_hard_attention_draws_locations_in_proportion_to_alpha():
    model = model_of("hard").train()
    x = images(1).expand(4000, -1, -1, -1)
    torch.manual_seed(0)
    with torch.no_grad():
        _, weights, _, a, _ = model.attend(x)
        alpha = hand_alpha(model, a[:1])[0]
    frequency = weights.mean(0)
    # 4000 draws: each frequency within 4.5 standard errors of α_i
    tolerance = 4.5 * (alpha * (1 - alpha) / 4000).sqrt() + 1e-3
    assert ((frequency - alpha).abs() <= tolerance).all()


def test_hard_attention_uses_the_most_probable_location_at_evaluation():
    model = model_of("hard").eval()
    _, weights, _, a, _ = model.attend(images())
    alpha = hand_alpha(model, a.detach())
    assert torch.equal(weights.argmax(-1), alpha.argmax(-1))


def scorer_parameters(model: GlimpseClassifier) -> list[torch.nn.Parameter]:
    return [*model.score.parameters(), *model.init_query.parameters()]


def test_hard_scorer_learns_only_through_reinforce():
    model = model_of("hard", entropy_weight=0.0).train()
    x, y = images(), torch.tensor([2, 0, 3])
    # cross-entropy alone: the one-hot sample carries no gradient to the scorer
    torch.manual_seed(3)
    F.cross_entropy(model(x), y).backward()
    for p in scorer_parameters(model):
        assert p.grad is None or torch.count_nonzero(p.grad) == 0
    model.zero_grad(set_to_none=True)
    # the objective: the scorer's gradient is that of −mean((r − b) log α_s), r = log p(y | a_s)
    torch.manual_seed(3)
    loss = model.objective({"images": x}, y)
    loss.backward()
    got = [p.grad.clone() for p in scorer_parameters(model)]
    model.zero_grad(set_to_none=True)
    torch.manual_seed(3)
    logits, weights, _, a, _ = model.attend(x)
    s = weights.argmax(-1)
    reward = -F.cross_entropy(logits, y, reduction="none").detach()
    baseline = 0.0  # the moving average starts at 0
    log_alpha_s = hand_alpha(model, a).gather(1, s[:, None]).squeeze(1).log()
    surrogate = -((reward - baseline) * log_alpha_s).mean()
    expected = torch.autograd.grad(surrogate, scorer_parameters(model))
    assert any(torch.count_nonzero(g) > 0 for g in expected)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-8, atol=1e-12)
    # the baseline moved towards the batch's mean reward (decay 0.9)
    torch.testing.assert_close(model.align.baseline, 0.1 * reward.mean())


def test_hard_objective_adds_the_entropy_bonus():
    model = model_of("hard", reinforce_weight=0.0, entropy_weight=0.5).train()
    x, y = images(), torch.tensor([1, 1, 2])
    torch.manual_seed(4)
    loss = model.objective({"images": x}, y)
    torch.manual_seed(4)
    logits, _, _, a, _ = model.attend(x)
    alpha = hand_alpha(model, a)
    entropy = -(alpha * alpha.log()).sum(-1).mean()  # H[α], Xu §4.1
    torch.testing.assert_close(loss, F.cross_entropy(logits, y) - 0.5 * entropy)


@pytest.mark.parametrize("attention", ["soft", "hard"])
def test_uniform_ablation_attends_to_the_mean_annotation(attention):
    model = model_of(attention).eval()
    x = images()
    with torch.no_grad():
        before = model(x)
        with ablate(model, mode="uniform"):
            after = model(x)
        expected = model.output(model.annotations(x).mean(1))  # α_i = 1/L for every location
    assert (before - after).abs().max() > 1e-4
    torch.testing.assert_close(after, expected, rtol=1e-10, atol=1e-12)


def test_bad_attention_kind_is_rejected():
    with pytest.raises(ValueError, match="'soft' or 'hard'"):
        GlimpseClassifier(1, 3, attention="medium")
