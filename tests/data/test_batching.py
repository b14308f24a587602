"""Batching: hand-written padded tensors, determinism by (seed, step), epoch coverage."""

import pytest
import torch

from attnkit.data import BOS, EOS, PAD, Batches, Example, Vocabulary, collate, encode


@pytest.fixture
def vocabs():
    source = Vocabulary(["<pad>", "<unk>", "<bos>", "<eos>", "a", "b", "c"])
    target = Vocabulary(["<pad>", "<unk>", "<bos>", "<eos>", "x", "y"])
    return source, target


def test_collate_hand_example(vocabs):
    examples = [
        Example(("a", "b", "c"), ("x",), links=frozenset({(0, 0), (2, 0)})),
        Example(("c",), ("y", "x", "zz"), links=frozenset({(0, 1)})),
    ]
    batch = collate(encode(examples, *vocabs))
    assert torch.equal(batch.source, torch.tensor([[4, 5, 6], [6, PAD, PAD]]))
    assert torch.equal(batch.source_lengths, torch.tensor([3, 1]))
    assert torch.equal(batch.target_in, torch.tensor([[BOS, 4, PAD, PAD], [BOS, 5, 4, 1]]))
    assert torch.equal(batch.target_out, torch.tensor([[4, EOS, PAD, PAD], [5, 4, 1, EOS]]))
    expected = torch.zeros(2, 4, 3)
    expected[0, 0, 0] = expected[0, 0, 2] = 1  # x <- a, c
    expected[1, 1, 0] = 1  # second target word x <- c; EOS rows stay empty
    assert batch.alignment.dtype == torch.float32
    assert torch.equal(batch.alignment, expected)
    for tensor in (batch.source, batch.target_in, batch.target_out, batch.source_lengths):
        assert tensor.dtype == torch.long


def test_alignment_only_when_every_example_has_links(vocabs):
    examples = [Example(("a",), ("x",), links=frozenset({(0, 0)})), Example(("b",), ("y",))]
    assert collate(encode(examples, *vocabs)).alignment is None
    # An empty link set is still "has links": a valid all-zero target.
    examples[1] = Example(("b",), ("y",), links=frozenset())
    assert collate(encode(examples, *vocabs)).alignment.sum() == 1


def _corpus(n=230):
    generator = torch.Generator().manual_seed(123)
    examples = []
    for i in range(n):
        s, t = torch.randint(1, 30, (2,), generator=generator).tolist()
        examples.append(
            Example(tuple(f"s{i}_{k}" for k in range(s)), tuple(f"t{k}" for k in range(t)))
        )
    source = Vocabulary.build(e.source for e in examples)
    target = Vocabulary.build(e.target for e in examples)
    return encode(examples, source, target)


def _key(batch):
    return batch.source[:, 0].tolist()  # first source id identifies an example (unique words)


def test_same_seed_and_step_give_the_same_batch():
    encoded = _corpus()
    a, b = Batches(encoded, 16, seed=7), Batches(encoded, 16, seed=7)
    assert len(a) == 15  # ceil(230 / 16)
    for step in (0, 3, 14, 15, 44, 3):  # any order, across epochs, back again
        x, y = a.batch(step), b.batch(step)
        for name in ("source", "source_lengths", "target_in", "target_out"):
            assert torch.equal(getattr(x, name), getattr(y, name))
    assert not torch.equal(Batches(encoded, 16, seed=8).batch(0).source, a.batch(0).source)


def test_each_epoch_covers_every_example_once_in_a_new_order():
    encoded = _corpus()
    batches = Batches(encoded, 16, seed=0, pool_batches=4)
    epochs = []
    for epoch in range(2):
        keys = [
            k for i in range(len(batches)) for k in _key(batches.batch(epoch * len(batches) + i))
        ]
        assert sorted(keys) == sorted(e.source[0] for e in encoded)
        epochs.append(keys)
    assert epochs[0] != epochs[1]


def test_length_grouping_reduces_padding():
    encoded = _corpus()
    batches = Batches(encoded, 16, seed=0)
    bucketed = sum((b.source == PAD).sum().item() for b in map(batches.batch, range(len(batches))))
    # Reference: the same batch size without length sorting, from an unrelated permutation.
    order = torch.randperm(len(encoded), generator=torch.Generator().manual_seed(1)).tolist()
    plain = sum(
        (collate([encoded[i] for i in order[k : k + 16]]).source == PAD).sum().item()
        for k in range(0, len(encoded), 16)
    )
    assert bucketed < plain / 2


def test_unshuffled_and_iteration_keep_the_given_order():
    encoded = _corpus(40)
    batches = Batches(encoded, 16, seed=0, shuffle=False)
    expected = [e.source[0] for e in encoded]
    assert [k for b in batches for k in _key(b)] == expected
    assert [k for s in range(3) for k in _key(batches.batch(s + 3))] == expected
    assert [len(b) for b in batches] == [16, 16, 8]


def test_bad_arguments():
    encoded = _corpus(5)
    with pytest.raises(ValueError, match="batch_size must be an int >= 1, got 0"):
        Batches(encoded, 0, seed=0)
    with pytest.raises(ValueError, match="step must be an int >= 0, got -1"):
        Batches(encoded, 2, seed=0).batch(-1)
    with pytest.raises(ValueError, match="at least one example"):
        Batches([], 2, seed=0)
    with pytest.raises(TypeError, match="source_vocab must be a Vocabulary, got dict"):
        encode([], {}, {})
