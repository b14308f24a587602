"""Multi-query associative recall (MQAR; Arora et al. 2023, "Zoology", §3).

A sequence first lists ``D`` key-value pairs, then asks for several keys again; at each repeated
key the model must output the value that followed that key in the list::

    A 4 B 3 C 6 | ... B ... A ... C ...      targets at the queries:  3, 4, 6

How the data are derived (a generator; nothing is downloaded): the procedure of Zoology's
``multiquery_ar`` (zoology/data/associative_recall.py), re-implemented on a seeded
``torch.Generator``:

- keys are ``D`` distinct tokens of ``1 .. V/2 - 1``, values ``D`` distinct tokens of
  ``V/2 .. V - 1`` (``V`` = ``vocab_size``); the context is ``k_1 v_1 k_2 v_2 … k_D v_D``;
- the rest of the sequence has ``S = (L - 2D) / 2`` even slots; each key is asked again once, in
  a slot ``g`` drawn without replacement with probability ``∝ a·g^(a-1)`` for ``g = 1..S``
  (``a = power_a``, 0.01 in Zoology: a power law favouring short gaps), at position
  ``2D + 2(g - 1)``;
- the target at a query's position is its value; every other target is :data:`IGNORE`
  (``-100``, ``F.cross_entropy``'s default ``ignore_index``);
- every other position holds a uniformly drawn token of ``0 .. V - 1`` (Zoology's
  ``random_non_queries``; these may coincide with keys, as there).

Zoology builds the sequence one token longer and shifts inputs and labels by one (a language
model predicts the next token); the result is the same: the query token and its target share a
position. Requirements (as Zoology's): ``L`` even, ``V > L``, ``4D <= L``.

The task is meant for causal models, as Zoology trains them: a query must be answered from the
context before it. Measured in ``benchmarks/efficient_quality.py`` (``L = 64``, ``D = 8``,
``V = 128``, a 2-layer exact-attention model, batch 16): causally it reaches 100 % test accuracy
within 2,000 steps; with bidirectional attention it stays near ``1/D`` (any value of the context)
after 9,800 steps.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: target of positions that are not queries (cross-entropy's ignore_index)
IGNORE = -100


def multiquery_associative_recall(
    num_examples: int,
    seq_len: int = 256,
    num_kv_pairs: int = 16,
    vocab_size: int = 512,
    seed: int = 0,
    *,
    power_a: float = 0.01,
) -> tuple[Tensor, Tensor]:
    """``num_examples`` MQAR sequences (see the module doc for the construction).

    Args:
        num_examples: ``N``.
        seq_len: ``L``, even.
        num_kv_pairs: ``D``, with ``4D <= L``.
        vocab_size: ``V > L``; keys come from the lower half, values from the upper half.
        seed: seed of the ``torch.Generator``; the same seed gives the same tensors.
        power_a: exponent ``a`` of the query-gap distribution ``∝ a·g^(a-1)``.

    Returns:
        ``(inputs, targets)``, both ``[B, L]`` int64: tokens in ``0 .. V-1``; targets the value
        at each query position and :data:`IGNORE` elsewhere (``D`` targets per row).

    Example:
        >>> x, y = multiquery_associative_recall(2, seq_len=32, num_kv_pairs=4, vocab_size=64)
        >>> x.shape, int((y != IGNORE).sum())
        (torch.Size([2, 32]), 8)
    """
    for name, value in (
        ("num_examples", num_examples),
        ("seq_len", seq_len),
        ("num_kv_pairs", num_kv_pairs),
        ("vocab_size", vocab_size),
        ("seed", seed),
    ):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if num_examples < 0 or num_kv_pairs < 1:
        raise ValueError(
            f"expected num_examples >= 0 and num_kv_pairs >= 1, got {num_examples}, {num_kv_pairs}"
        )
    if seq_len % 2:
        raise ValueError(f"seq_len must be even, got {seq_len}")
    if vocab_size <= seq_len:
        raise ValueError(f"vocab_size must exceed seq_len ({seq_len}), got {vocab_size}")
    if 4 * num_kv_pairs > seq_len:
        raise ValueError(
            f"num_kv_pairs must be <= seq_len / 4 = {seq_len // 4}, got {num_kv_pairs}"
        )
    if not power_a > 0:
        raise ValueError(f"power_a must be > 0, got {power_a}")
    g = torch.Generator().manual_seed(seed)
    n, d, half = num_examples, num_kv_pairs, vocab_size // 2
    # D distinct keys and values per row: the first D of a random permutation of each range
    keys = 1 + torch.rand(n, half - 1, generator=g).argsort(-1)[:, :d]
    values = half + torch.rand(n, vocab_size - half, generator=g).argsort(-1)[:, :d]
    context = 2 * d
    slots = (seq_len - context) // 2
    gaps = torch.arange(1, slots + 1, dtype=torch.float64)
    p = power_a * gaps ** (power_a - 1)
    slot = torch.multinomial(p.expand(n, slots), d, replacement=False, generator=g)  # 0-based
    positions = context + 2 * slot
    inputs = torch.randint(vocab_size, (n, seq_len), generator=g)
    inputs[:, 0:context:2] = keys
    inputs[:, 1:context:2] = values
    inputs.scatter_(1, positions, keys)
    targets = torch.full((n, seq_len), IGNORE, dtype=torch.long)
    targets.scatter_(1, positions, values)
    return inputs, targets
