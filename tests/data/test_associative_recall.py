"""Multi-query associative recall: every target re-derived here from the sequence itself (scan the
key-value context into a dict, look each query up), plus Zoology's construction rules."""

from __future__ import annotations

import pytest
import torch

from attnkit.data.associative_recall import IGNORE, multiquery_associative_recall

L, D, V = 64, 8, 128


@pytest.fixture(scope="module")
def data():
    return multiquery_associative_recall(200, seq_len=L, num_kv_pairs=D, vocab_size=V, seed=1)


def test_targets_are_the_values_of_the_queried_keys(data):
    inputs, targets = data
    assert inputs.shape == targets.shape == (200, L)
    assert inputs.dtype == targets.dtype == torch.long
    for x, y in zip(inputs.tolist(), targets.tolist(), strict=True):
        pairs = dict(zip(x[0 : 2 * D : 2], x[1 : 2 * D : 2], strict=True))
        assert len(pairs) == D  # distinct keys
        asked = []
        for position, target in enumerate(y):
            if target == IGNORE:
                continue
            assert position >= 2 * D and (position - 2 * D) % 2 == 0  # an even query slot
            assert pairs[x[position]] == target
            asked.append(x[position])
        assert sorted(asked) == sorted(pairs)  # each key asked exactly once


def test_vocabulary_halves(data):
    inputs, _ = data
    keys, values = inputs[:, 0 : 2 * D : 2], inputs[:, 1 : 2 * D : 2]
    assert int(keys.min()) >= 1 and int(keys.max()) < V // 2
    assert int(values.min()) >= V // 2 and int(values.max()) < V
    assert int(inputs.min()) >= 0 and int(inputs.max()) < V
    assert len(set(values[0].tolist())) == D


def test_query_gaps_follow_the_power_law(data):
    _, targets = data
    slots = (targets[:, 2 * D :] != IGNORE).nonzero()[:, 1] // 2  # 0-based slots
    s = (L - 2 * D) // 2
    # P(slot g) ∝ g^(a-1) with a = 0.01 favours short gaps: the first quarter of the slots gets
    # more than the uniform quarter of the queries (expected ≈ 0.36 with 8 of 24 drawn per row)
    assert (slots < s // 4).float().mean() > 0.3
    uniform = multiquery_associative_recall(200, L, D, V, seed=1, power_a=1.0)[1]
    u_slots = (uniform[:, 2 * D :] != IGNORE).nonzero()[:, 1] // 2
    assert (u_slots < s // 4).float().mean() < (slots < s // 4).float().mean()


def test_seeded():
    a = multiquery_associative_recall(5, 32, 4, 64, seed=7)
    b = multiquery_associative_recall(5, 32, 4, 64, seed=7)
    c = multiquery_associative_recall(5, 32, 4, 64, seed=8)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], c[0])


def test_bad_input():
    with pytest.raises(ValueError, match="even"):
        multiquery_associative_recall(1, seq_len=33, num_kv_pairs=4, vocab_size=64)
    with pytest.raises(ValueError, match="vocab_size"):
        multiquery_associative_recall(1, seq_len=64, num_kv_pairs=4, vocab_size=64)
    with pytest.raises(ValueError, match="seq_len / 4"):
        multiquery_associative_recall(1, seq_len=32, num_kv_pairs=9, vocab_size=64)
    with pytest.raises(TypeError, match="seq_len"):
        multiquery_associative_recall(1, seq_len=32.0)  # type: ignore[arg-type]
