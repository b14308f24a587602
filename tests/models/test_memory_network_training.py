"""MemN2N's training devices against the paper (Sukhbaatar et al. 2015): position encoding in
float64 (§4.1), linear start (§4.2: the hops without their softmax until the validation loss stops
decreasing) and random noise (§4.1: empty memories shift the temporal slots in training)."""

from __future__ import annotations

import math

import pytest
import torch

from attnkit.evaluate import ablate
from attnkit.models.memory_network import (
    EndToEndMemoryNetwork,
    LinearStart,
    Unnormalized,
    temporal_slots,
)

ANSWERS = torch.tensor([3, 5, 7])
MEMORIES = torch.tensor(
    [
        [[4, 5, 6, 0], [7, 8, 0, 0], [9, 4, 5, 6], [0, 0, 0, 0]],
        [[6, 6, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]],
    ]
)
MASK = torch.tensor([[True, True, True, False], [True, False, False, False]])
QUESTION = torch.tensor([[2, 9, 4, 8, 6], [8, 0, 0, 0, 0]])


def paper_position_encoding(big_j: int, dim: int) -> list[list[float]]:
    """``l_kj = (1 − j/J) − (k/d)(1 − 2j/J)`` for j = 1..J (rows), k = 1..d (columns)."""
    return [
        [(1 - j / big_j) - (k / dim) * (1 - 2 * j / big_j) for k in range(1, dim + 1)]
        for j in range(1, big_j + 1)
    ]


def net(**options) -> EndToEndMemoryNetwork:
    torch.manual_seed(0)
    options.setdefault("init_std", 0.5)  # far from uniform attention
    return EndToEndMemoryNetwork(10, ANSWERS, embed_dim=7, hops=3, memory_size=6, **options)


def hop_reference(model: EndToEndMemoryNetwork, linear: bool) -> torch.Tensor:
    """Each hop's weights ``[B, K, M]`` in float64: ``u·m_i`` (linear) or its softmax, with
    ``u^{k+1} = u^k + Σ_i p_i c_i`` and ``A^{k+1} = C^k``."""
    tables = [e.weight.detach().double() for e in model.embeddings]
    temporal = model.temporal.detach().double()

    def sentence(table: torch.Tensor, words: list[int]) -> torch.Tensor:
        real = [w for w in words if w]
        weights = paper_position_encoding(len(real), table.shape[1])
        return sum(
            (torch.tensor(weights[j], dtype=torch.float64) * table[w] for j, w in enumerate(real)),
            torch.zeros(table.shape[1], dtype=torch.float64),
        )

    rows = []
    for b in range(MEMORIES.shape[0]):
        u = sentence(tables[0], QUESTION[b].tolist())
        real = [i for i in range(MEMORIES.shape[1]) if MASK[b, i]]
        hops = []
        for k in range(model.hops):
            m = [sentence(tables[k], MEMORIES[b, i].tolist()) + temporal[k, i] for i in real]
            c = [
                sentence(tables[k + 1], MEMORIES[b, i].tolist()) + temporal[k + 1, i] for i in real
            ]
            scores = torch.stack([u @ mi for mi in m])
            p = scores if linear else torch.softmax(scores, 0)
            u = u + sum(p[n] * c[n] for n in range(len(real)))
            row = torch.zeros(MEMORIES.shape[1], dtype=torch.float64)
            row[real] = p
            hops.append(row)
        rows.append(torch.stack(hops))
    return torch.stack(rows)


@pytest.mark.parametrize("dim", [1, 2, 7, 20])
def test_question_embedding_is_the_papers_position_encoding_in_float64(dim: int) -> None:
    torch.manual_seed(dim)
    model = EndToEndMemoryNetwork(10, ANSWERS, embed_dim=dim, hops=1, memory_size=4).double()
    table = model.embeddings[0].weight.detach()
    u1 = model.read(MEMORIES, MASK, QUESTION).states[:, 0]  # u^1 = Σ_j l_j ∘ B q_j
    for b, words in enumerate(QUESTION.tolist()):
        real = [w for w in words if w]
        l = paper_position_encoding(len(real), dim)
        expected = [
            math.fsum(l[j][k - 1] * float(table[w, k - 1]) for j, w in enumerate(real))
            for k in range(1, dim + 1)
        ]
        torch.testing.assert_close(u1[b], torch.tensor(expected, dtype=torch.float64))
    # J = 1: l_k1 = (1 - 1) - (k/d)(1 - 2) = k/d
    assert paper_position_encoding(1, 4) == [[0.25, 0.5, 0.75, 1.0]]


def test_position_scale_multiplies_the_papers_encoding() -> None:
    # the authors' implementation: 1 + 4(k - (d+1)/2)(j - (J+1)/2)/(dJ), about twice l_kj
    big_j, dim = 6, 20
    paper = torch.tensor(paper_position_encoding(big_j, dim), dtype=torch.float64)
    j = torch.arange(1, big_j + 1, dtype=torch.float64)[:, None]
    k = torch.arange(1, dim + 1, dtype=torch.float64)
    authors = 1 + 4 * (k - (dim + 1) / 2) * (j - (big_j + 1) / 2) / (dim * big_j)
    # twice the paper's, but for the half-word, half-dimension shifts of the centre
    shift = (1 - 2 * (j - big_j / 2) - 2 * (k - dim / 2)) / (dim * big_j)
    torch.testing.assert_close(authors, 2 * paper + shift)
    torch.manual_seed(0)
    once = EndToEndMemoryNetwork(10, ANSWERS, embed_dim=dim, hops=1, memory_size=4).double()
    torch.manual_seed(0)
    twice = EndToEndMemoryNetwork(
        10, ANSWERS, embed_dim=dim, hops=1, memory_size=4, position_scale=2.0
    ).double()
    u1 = once.read(MEMORIES, MASK, QUESTION).states[:, 0]
    torch.testing.assert_close(twice.read(MEMORIES, MASK, QUESTION).states[:, 0], 2 * u1)
    with pytest.raises(ValueError, match="position_scale"):
        EndToEndMemoryNetwork(10, ANSWERS, position_scale=0.0)


def test_linear_start_has_no_softmax_until_the_validation_loss_stops_decreasing() -> None:
    model = net(linear_start=True).double()
    assert model.linear
    out = model.read(MEMORIES, MASK, QUESTION)
    torch.testing.assert_close(out.weights, hop_reference(model, linear=True))
    assert (
        abs(float(out.weights[0, 0].detach().sum()) - 1.0) > 0.1
    )  # raw scores, not a distribution
    model.after_validation({"loss": 2.0})
    model.after_validation({"loss": 1.5})  # still decreasing
    assert model.linear
    model.after_validation({"loss": 1.5})  # stopped decreasing: the softmaxes return
    assert not model.linear
    out = model.read(MEMORIES, MASK, QUESTION)
    torch.testing.assert_close(out.weights, hop_reference(model, linear=False))
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(2, 3, dtype=torch.float64))
    model.after_validation({"loss": 0.1})  # once inserted, they stay
    assert not model.linear


def test_without_linear_start_the_softmax_is_there_from_the_start() -> None:
    model = net().double()
    assert not model.linear and model.linear_start is None
    model.after_validation({"loss": 1.0})  # nothing to do
    out = model.read(MEMORIES, MASK, QUESTION)
    torch.testing.assert_close(out.weights, hop_reference(model, linear=False))
    assert not any("linear_start" in key for key in model.state_dict())


def test_linear_start_state_is_saved_with_the_model() -> None:
    model = net(linear_start=True, linear_start_patience=2)
    for loss in (3.0, 2.0, 2.5, 2.1):  # two validations without a lower loss
        model.after_validation({"loss": loss})
    assert not model.linear
    fresh = net(linear_start=True, linear_start_patience=2)
    assert fresh.linear
    fresh.load_state_dict(model.state_dict())
    assert not fresh.linear
    resumed = net(linear_start=True, linear_start_patience=2)
    state = net(linear_start=True, linear_start_patience=2)
    state.after_validation({"loss": 3.0})
    state.after_validation({"loss": 3.5})  # one of two
    resumed.load_state_dict(state.state_dict())
    resumed.after_validation({"loss": 3.2})  # not below 3.0: the second
    assert not resumed.linear


def test_linear_start_patience_and_bad_losses() -> None:
    start = LinearStart(patience=3)
    assert [start.update(x) for x in (5.0, 4.0, 4.0, 4.5, 3.9, 4.0, 4.0, 4.0)] == [
        True,
        True,
        True,
        True,
        True,  # a lower loss starts the count again
        True,
        True,
        False,
    ]
    with pytest.raises(ValueError, match="finite validation loss"):
        LinearStart().update(math.nan)
    with pytest.raises(ValueError, match="patience"):
        LinearStart(patience=0)


def test_unnormalized_alignment_zeroes_masked_keys() -> None:
    e = torch.tensor([[[2.0, -1.0, 3.0, 0.5]]])
    weights = Unnormalized()(e, torch.tensor([[[True, False, True, True]]]))
    assert weights.tolist() == [[[2.0, 0.0, 3.0, 0.5]]]


def test_uniform_ablation_replaces_the_linear_hops_too() -> None:
    model = net(linear_start=True)
    with ablate(model, "uniform"):
        out = model.read(MEMORIES, MASK, QUESTION)
    uniform = MASK.float() / MASK.sum(-1, keepdim=True)
    torch.testing.assert_close(out.weights, uniform[:, None].expand(-1, 3, -1))


def test_random_noise_shifts_slots_by_empty_memories_in_training_only() -> None:
    n, memory_size = 20, 50
    mask = torch.zeros(2000, 24, dtype=torch.bool)
    mask[:, :n] = True
    torch.manual_seed(0)
    slots = temporal_slots(mask, memory_size, noise=0.1)
    real = slots[:, :n]
    assert (real[:, 1:] > real[:, :-1]).all()  # newest first, one slot each, order kept
    # n memories in n + n_0 slots, n_0 uniform in {0, 1, 2} (⌈0.1 · 20⌉ = 2 empty memories)
    last = real[:, -1] - (n - 1)
    counts = torch.bincount(last, minlength=3)
    assert len(counts) == 3 and (counts > 2000 / 3 - 100).all(), counts.tolist()
    assert (real[:, 0] <= last).all()
    # padding keeps its own slot; without noise every memory has the exact one
    torch.testing.assert_close(slots[:, n:], torch.arange(n, 24).expand(2000, -1))
    torch.testing.assert_close(temporal_slots(mask, memory_size), torch.arange(24).expand(2000, -1))
    # slots past the table share the last one
    capped = temporal_slots(torch.ones(1, 6, dtype=torch.bool), 6, noise=0.5)
    assert capped.max() <= 5
    # the model draws them in training mode only
    model = net(temporal_noise=0.5)
    model.eval()
    first = model(MEMORIES, MASK, QUESTION)
    torch.testing.assert_close(model(MEMORIES, MASK, QUESTION), first)
    model.train()
    torch.manual_seed(3)
    outputs = {tuple(model(MEMORIES, MASK, QUESTION)[0].tolist()) for _ in range(20)}
    assert len(outputs) > 1


def test_temporal_noise_needs_temporal_encoding() -> None:
    with pytest.raises(ValueError, match="temporal_noise"):
        net(temporal_encoding=False, temporal_noise=0.1)
    with pytest.raises(ValueError, match="temporal_noise"):
        net(temporal_noise=1.0)
