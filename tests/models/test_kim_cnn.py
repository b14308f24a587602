"""Kim's (2014) CNN against his equations written out in float64: every window's
``ReLU(w · x_{i:i+h−1} + b)`` over the zero-padded sentence, max over time, the output layer;
padding that does not change the logits; the max-norm constraint after every update, compared
with a model projected by hand after each optimizer step; his initialisation; bad input."""

from __future__ import annotations

import copy

import pytest
import torch

from attnkit.models.kim_cnn import KimCNN

TOKENS = torch.tensor([[4, 5, 6, 7, 2, 9], [8, 9, 3, 0, 0, 0], [5, 0, 0, 0, 0, 0]])
WIDTHS = (2, 3, 5)


def make(seed: int = 0, **kwargs) -> KimCNN:
    torch.manual_seed(seed)
    model = KimCNN(12, 4, embed_dim=6, widths=WIDTHS, feature_maps=3, **kwargs)
    with torch.no_grad():  # his zero output layer and tiny filters would hide mistakes
        for parameter in model.parameters():
            parameter.normal_(generator=torch.Generator().manual_seed(seed + parameter.numel()))
        model.embedding.weight[0] = 0.0
    return model.double().eval()


def logits_by_hand(model: KimCNN, sentence: list[int]) -> torch.Tensor:
    """Kim's §2 for one sentence alone: ``max(widths) − 1`` zero vectors before it and
    ``max(widths)`` after (his code's padding), ``c_i = ReLU(Σ_{j<h} W[:, :, j] · x_{i+j} + b)``
    for every window, ``ĉ = max_i c_i``, then ``W_o z + b_o``."""
    table = model.embedding.weight.detach()
    k, widest = table.shape[1], max(model.widths)
    zeros = torch.zeros(widest - 1, k, dtype=torch.float64)
    x = torch.cat([zeros, table[sentence], torch.zeros(widest, k, dtype=torch.float64)])
    features = []
    for conv, h in zip(model.convolutions, model.widths, strict=True):
        w, b = conv.weight.detach(), conv.bias.detach()  # [maps, k, h], [maps]
        windows = [
            torch.relu(sum(w[:, :, j] @ x[i + j] for j in range(h)) + b)
            for i in range(x.shape[0] - h + 1)
        ]
        features.append(torch.stack(windows).max(dim=0).values)
    z = torch.cat(features)
    return model.output.weight.detach() @ z + model.output.bias.detach()


def test_logits_are_kims_equations_and_padding_changes_nothing() -> None:
    model = make(max_norm=None)
    with torch.no_grad():
        got = model(TOKENS)
        extra = model(torch.cat([TOKENS, torch.zeros(3, 4, dtype=torch.long)], dim=1))
    for b, row in enumerate(TOKENS.tolist()):
        sentence = [t for t in row if t != 0]
        expected = logits_by_hand(model, sentence)
        torch.testing.assert_close(got[b], expected, rtol=1e-12, atol=1e-12)
        alone = model(torch.tensor([sentence]))[0].detach()
        torch.testing.assert_close(alone, expected, rtol=1e-12, atol=1e-12)
    assert torch.equal(extra, got)  # more padding in the batch: the same logits


def test_a_sentence_shorter_than_a_filter_is_read_through_the_padding() -> None:
    model = make(max_norm=None)
    with torch.no_grad():
        got = model(torch.tensor([[7]]))[0]
    torch.testing.assert_close(got, logits_by_hand(model, [7]), rtol=1e-12, atol=1e-12)


def test_the_max_norm_constraint_rescales_only_the_long_class_vectors() -> None:
    model = make(max_norm=3.0)
    with torch.no_grad():
        model.output.weight.copy_(torch.randn(4, 9, dtype=torch.float64))
        model.output.weight[0] *= 10.0 / model.output.weight[0].norm()  # too long
        model.output.weight[1] *= 2.0 / model.output.weight[1].norm()  # short enough
    before = model.output.weight.detach().clone()
    norms = before.norm(dim=1, keepdim=True)
    expected = before * torch.clamp(3.0 / norms, max=1.0)  # w ← w · s / ||w|| when ||w|| > s
    with torch.no_grad():
        logits = model(TOKENS)
    after = model.output.weight.detach()
    torch.testing.assert_close(after, expected, rtol=1e-6, atol=0)
    assert torch.equal(after[1], before[1])
    assert after.norm(dim=1).max() <= 3.0
    z = torch.stack([logits_by_hand(model, [t for t in r if t]) for r in TOKENS.tolist()])
    torch.testing.assert_close(logits, z, rtol=1e-12, atol=1e-12)  # computed with the projection


def test_the_constraint_holds_after_every_update_as_kims_adadelta_step() -> None:
    """Ours (projection at the start of each forward) against a model without the constraint
    whose output rows are projected by hand after each optimizer step, as Kim's update does:
    the same weights are used and the same gradients taken at every step."""
    ours = make(max_norm=0.5, dropout=0.0).train()
    with torch.no_grad():  # start just inside the ball (his zero output layer is inside it)
        weight = ours.output.weight
        weight.mul_(0.499 / weight.norm(dim=1, keepdim=True))
    reference = copy.deepcopy(ours)
    reference.max_norm = None
    labels = torch.tensor([0, 2, 3])
    optimizers = [torch.optim.Adadelta(m.parameters(), lr=30.0, rho=0.95, eps=1e-6)
                  for m in (ours, reference)]  # fmt: skip
    projected = 0
    for _ in range(6):
        for model, optimizer in zip((ours, reference), optimizers, strict=True):
            loss = torch.nn.functional.cross_entropy(model(TOKENS), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            w = reference.output.weight
            projected += int((w.norm(dim=1) > 0.5).sum())
            w.mul_(torch.clamp(0.5 / w.norm(dim=1, keepdim=True), max=1.0))
    ours.eval()(TOKENS)  # any forward first projects the last update
    for mine, theirs in zip(ours.parameters(), reference.parameters(), strict=True):
        # 1e-5: torch.renorm (and Kim's code) divide by ||w|| + 1e-7, the reference by ||w||
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-8)
    assert ours.output.weight.norm(dim=1).max() <= 0.5 + 1e-12
    assert projected > 0  # the constraint was active: some updates left the ball


def test_kims_initialisation() -> None:
    torch.manual_seed(0)
    vectors = torch.rand(12, 6) - 0.5
    model = KimCNN(12, 4, widths=WIDTHS, feature_maps=30, embeddings=vectors)
    assert torch.all(model.output.weight == 0) and torch.all(model.output.bias == 0)
    for conv in model.convolutions:
        assert conv.weight.abs().max() <= 0.01 and conv.weight.abs().max() > 0.009
        assert torch.all(conv.bias == 0)
    assert torch.equal(model.embedding.weight[1:], vectors[1:])
    assert torch.all(model.embedding.weight[0] == 0)  # PAD


def test_bad_input_is_refused_in_one_line() -> None:
    model = make()
    with pytest.raises(ValueError, match=r"tokens must be long token ids \[B, L\], got "
                       r"torch\.float32 \(2, 3\)"):  # fmt: skip
        model(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"widths must be filter widths >= 1, got \(3, 0\)"):
        KimCNN(5, 2, widths=(3, 0))
    with pytest.raises(ValueError, match=r"max_norm must be positive"):
        KimCNN(5, 2, max_norm=0.0)
