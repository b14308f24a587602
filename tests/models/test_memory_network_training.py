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


def test_fixed_linear_start_ends_after_exactly_n_validations_whatever_the_losses() -> None:
    for losses in ((5.0, 4.0, 3.0, 2.0, 1.0), (1.0, 2.0, 3.0, 4.0, 5.0)):
        model = net(linear_start=True, linear_start_epochs=3, linear_start_patience=1)
        stays = []
        for loss in losses:
            model.after_validation({"loss": loss})
            stays.append(model.linear)
        assert stays == [True, True, False, False, False], losses
    start = LinearStart(epochs=2)
    assert [start.update(math.nan), start.update(math.inf)] == [True, False]  # losses unread
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="epochs must be a positive int"):
            LinearStart(epochs=bad)
    with pytest.raises(ValueError, match=r"linear_start_epochs .* needs one"):
        net(linear_start_epochs=3)


def test_fixed_linear_start_count_is_saved_with_the_model() -> None:
    model = net(linear_start=True, linear_start_epochs=3)
    model.after_validation({"loss": 1.0})
    model.after_validation({"loss": 1.0})
    keys = set(net(linear_start=True).state_dict())
    assert set(model.state_dict()) == keys  # the same buffers as the patience rule's
    resumed = net(linear_start=True, linear_start_epochs=3)
    resumed.load_state_dict(model.state_dict())
    assert resumed.linear
    resumed.after_validation({"loss": 1.0})  # the third
    assert not resumed.linear


def null_hop_reference(model: EndToEndMemoryNetwork, slots: int) -> torch.Tensor:
    """The first hop's weights ``[B, max(M, S)]`` in float64: the softmax over ``u·m_i`` of the
    real memories and a score 0 for each of the ``S − n`` null memories (zero vectors)."""
    table, temporal = model.embeddings[0].weight.detach().double(), model.temporal.detach().double()

    def sentence(words: list[int]) -> torch.Tensor:
        real = [w for w in words if w]
        weights = paper_position_encoding(len(real), table.shape[1])
        return sum(
            (torch.tensor(weights[j], dtype=torch.float64) * table[w] for j, w in enumerate(real)),
            torch.zeros(table.shape[1], dtype=torch.float64),
        )

    width = max(MEMORIES.shape[1], slots)
    rows = []
    for b in range(MEMORIES.shape[0]):
        u = sentence(QUESTION[b].tolist())
        real = [i for i in range(MEMORIES.shape[1]) if MASK[b, i]]
        scores = [float(u @ (sentence(MEMORIES[b, i].tolist()) + temporal[0, i])) for i in real]
        nulls = max(0, slots - len(real))
        p = torch.softmax(torch.tensor(scores + [0.0] * nulls, dtype=torch.float64), 0)
        row = torch.zeros(width, dtype=torch.float64)
        row[real] = p[: len(real)]
        # the null memories fill the slots below S that hold no real memory
        row[[i for i in range(slots) if i not in real]] = p[len(real) :]
        rows.append(row)
    return torch.stack(rows)


@pytest.mark.parametrize("slots", [3, 4, 6])
def test_null_memories_take_part_in_the_softmax_with_score_zero(slots: int) -> None:
    model = net(null_memory_slots=slots).double()
    out = model.read(MEMORIES, MASK, QUESTION)
    assert out.weights.shape == (2, 3, max(4, slots))
    torch.testing.assert_close(out.weights[:, 0], null_hop_reference(model, slots))
    # a story of n < S memories leaves a share of the mass on its null memories
    real_mass = (out.weights[:, :, :4] * MASK[:, None]).sum(-1).detach()  # [B, K]
    for b, n in enumerate(MASK.sum(-1).tolist()):
        assert bool((real_mass[b] < 1 - 1e-6).all()) == (n < slots), (b, n)
    # linear start: a null memory's raw score is u·0 = 0 and its value 0
    linear = net(null_memory_slots=slots, linear_start=True).double()
    scores = linear.read(MEMORIES, MASK, QUESTION).weights
    torch.testing.assert_close(scores[:, :, :4] * MASK[:, None], hop_reference(linear, True))
    assert bool((scores[:, :, 4:] == 0).all()) and float(scores[1, :, 1:].detach().abs().sum()) == 0


def test_a_story_of_the_longest_length_is_unchanged_by_null_memories() -> None:
    full = MASK[:1]  # 3 real memories
    plain = net().double().read(MEMORIES[:1, :3], full[:, :3], QUESTION[:1])
    padded = net(null_memory_slots=3).double().read(MEMORIES[:1, :3], full[:, :3], QUESTION[:1])
    torch.testing.assert_close(padded.logits, plain.logits, rtol=0, atol=0)
    torch.testing.assert_close(padded.weights, plain.weights, rtol=0, atol=0)
    # a short story's answer does not depend on the longer stories of its batch
    model = net(null_memory_slots=2).double()
    alone = model.read(MEMORIES[1:, :1], MASK[1:, :1], QUESTION[1:])
    together = model.read(MEMORIES, MASK, QUESTION)  # padded to 4 for the 3-memory story
    torch.testing.assert_close(together.logits[1:], alone.logits, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(together.weights[1:, :, :2], alone.weights)
    assert float(together.weights[1:, :, 2:].detach().abs().sum()) == 0  # past S: masked out
    for bad in (0, 7, 2.0):
        with pytest.raises(ValueError, match="null_memory_slots must be an int"):
            net(null_memory_slots=bad)
