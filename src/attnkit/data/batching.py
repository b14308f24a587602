"""Padded, length-bucketed, reproducible mini-batches for sequence-to-sequence training.

The batch of a global training step depends only on ``(seed, step)``: epoch ``step // len`` has
its own ``torch.Generator`` seeded from ``(seed, epoch)``, so a run resumed at step ``k`` sees
exactly the batches an uninterrupted run would.

Within an epoch (bucketing, as in Bahdanau et al. 2015 §C / Sutskever et al. 2014 §3.4, to cut
padding): a seeded permutation of the examples is cut into pools of ``pool_batches`` batches; each
pool is sorted by (source length, target length) and cut into batches; then the order of all
batches is shuffled with the same generator.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnkit.data.corpus import Example, Links
from attnkit.data.vocabulary import BOS, EOS, PAD, Vocabulary


@dataclass(frozen=True)
class EncodedExample:
    """Token ids of one pair (no BOS/EOS added) and its supervised-attention links, if any."""

    source: tuple[int, ...]
    target: tuple[int, ...]
    links: Links | None = None


@dataclass
class Batch:
    """A padded batch (PAD = 0).

    Attributes:
        source: ``[B, S]`` long source ids (no BOS/EOS), S = the longest source.
        source_lengths: ``[B]`` long.
        target_in: ``[B, T]`` long decoder input ``BOS y_1 … y_n`` then PAD; T = longest n + 1.
        target_out: ``[B, T]`` long decoder output ``y_1 … y_n EOS`` then PAD.
        alignment: ``[B, T, S]`` float 0/1 gold attention: ``alignment[b, j, i] = 1`` iff link
            ``(i, j)`` (source i, target j) is in ``Example.links``; the EOS row and padding are 0.
            ``None`` unless every example of the batch has links.
    """

    source: Tensor
    source_lengths: Tensor
    target_in: Tensor
    target_out: Tensor
    alignment: Tensor | None = None

    def __len__(self) -> int:
        return self.source.shape[0]

    def to(self, device: torch.device | str) -> Batch:
        """The same batch on ``device``."""
        return Batch(
            self.source.to(device),
            self.source_lengths.to(device),
            self.target_in.to(device),
            self.target_out.to(device),
            None if self.alignment is None else self.alignment.to(device),
        )


def encode(
    examples: Sequence[Example], source_vocab: Vocabulary, target_vocab: Vocabulary
) -> list[EncodedExample]:
    """Ids of every example's source and target (unknown tokens → UNK), keeping ``links``."""
    for name, vocab in (("source_vocab", source_vocab), ("target_vocab", target_vocab)):
        if not isinstance(vocab, Vocabulary):
            raise TypeError(f"{name} must be a Vocabulary, got {type(vocab).__name__}")
    encoded = []
    for example in examples:
        if not isinstance(example, Example):
            raise TypeError(f"examples must be Example objects, got {type(example).__name__}")
        if not example.source or not example.target:
            raise ValueError(f"examples need a non-empty source and target, got {example}")
        encoded.append(
            EncodedExample(
                tuple(source_vocab.encode(list(example.source))),
                tuple(target_vocab.encode(list(example.target))),
                example.links,
            )
        )
    return encoded


def collate(examples: Sequence[EncodedExample]) -> Batch:
    """Pad a list of encoded examples into a :class:`Batch`."""
    if not examples:
        raise ValueError("cannot collate an empty list of examples")
    size = len(examples)
    source_length = max(len(e.source) for e in examples)
    target_length = max(len(e.target) for e in examples) + 1  # + BOS / EOS
    source = torch.full((size, source_length), PAD, dtype=torch.long)
    target_in = torch.full((size, target_length), PAD, dtype=torch.long)
    target_out = torch.full((size, target_length), PAD, dtype=torch.long)
    with_links = all(e.links is not None for e in examples)
    alignment = torch.zeros(size, target_length, source_length) if with_links else None
    for b, example in enumerate(examples):
        n = len(example.target)
        source[b, : len(example.source)] = torch.tensor(example.source)
        target_in[b, 0] = BOS
        target_in[b, 1 : n + 1] = torch.tensor(example.target)
        target_out[b, :n] = torch.tensor(example.target)
        target_out[b, n] = EOS
        if alignment is not None and example.links:
            i, j = zip(*example.links, strict=True)
            alignment[b, list(j), list(i)] = 1.0
    lengths = torch.tensor([len(e.source) for e in examples], dtype=torch.long)
    return Batch(source, lengths, target_in, target_out, alignment)


def _epoch_seed(seed: int, epoch: int) -> int:
    # A hash rather than seed + epoch, so runs with seeds s and s+1 do not share epochs.
    digest = hashlib.sha256(f"attnkit.Batches:{seed}:{epoch}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1  # manual_seed takes a non-negative int64


class Batches:
    """Mini-batches addressed by global step (see the module docstring).

    Args:
        encoded: examples from :func:`encode`.
        batch_size: examples per batch (the last batch of an epoch may be smaller).
        seed: seeds every epoch's generator together with the epoch number.
        shuffle: ``False`` gives consecutive examples in their given order, every epoch.
        pool_batches: batches per length-sorting pool (larger → less padding, less randomness).

    Example::

        >>> batches = Batches(encode(examples, src_vocab, tgt_vocab), batch_size=64, seed=0)
        >>> batch = batches.batch(step)   # same (seed, step) → same batch, in any process
    """

    def __init__(
        self,
        encoded: Sequence[EncodedExample],
        batch_size: int,
        seed: int,
        shuffle: bool = True,
        pool_batches: int = 50,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if isinstance(pool_batches, bool) or not isinstance(pool_batches, int) or pool_batches < 1:
            raise ValueError(f"pool_batches must be an int >= 1, got {pool_batches!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        if len(encoded) == 0:
            raise ValueError("Batches needs at least one example, got none")
        if not all(isinstance(e, EncodedExample) for e in encoded):
            raise TypeError("Batches takes the output of attnkit.data.encode (EncodedExample)")
        self.encoded = list(encoded)
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.pool_batches = pool_batches
        self._epoch: int | None = None
        self._plan: list[list[int]] = []

    def __len__(self) -> int:
        return -(-len(self.encoded) // self.batch_size)

    def epoch_plan(self, epoch: int) -> list[list[int]]:
        """The example indices of every batch of ``epoch``, in order."""
        n, size = len(self.encoded), self.batch_size
        if not self.shuffle:
            return [list(range(start, min(start + size, n))) for start in range(0, n, size)]
        generator = torch.Generator().manual_seed(_epoch_seed(self.seed, epoch))
        order = torch.randperm(n, generator=generator).tolist()
        pool = size * self.pool_batches
        plan: list[list[int]] = []
        for start in range(0, n, pool):
            chunk = sorted(
                order[start : start + pool],
                key=lambda i: (len(self.encoded[i].source), len(self.encoded[i].target)),
            )
            plan.extend(chunk[k : k + size] for k in range(0, len(chunk), size))
        return [plan[k] for k in torch.randperm(len(plan), generator=generator).tolist()]

    def batch(self, step: int) -> Batch:
        """The batch of global step ``step`` (epoch ``step // len(self)``)."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be an int >= 0, got {step!r}")
        epoch, index = divmod(step, len(self))
        if epoch != self._epoch:  # one plan per epoch: consecutive steps reuse it
            self._plan, self._epoch = self.epoch_plan(epoch), epoch
        return collate([self.encoded[i] for i in self._plan[index]])

    def __iter__(self) -> Iterator[Batch]:
        """One pass over the examples in their given order (for evaluation)."""
        n, size = len(self.encoded), self.batch_size
        for start in range(0, n, size):
            yield collate(self.encoded[start : start + size])
