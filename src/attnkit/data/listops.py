"""ListOps as generated for the Long Range Arena (Tay et al. 2021, §2.2.1; Nangia & Bowman 2018).

A ListOps example is a nested prefix expression over the digits 0-9 with four list operators,
``[MAX``, ``[MIN``, ``[MED`` (median, rounded down) and ``[SM`` (sum modulo 10), each closed by
``]``; the label is the expression's value, one of ten classes::

    [MAX 2 9 [MIN 4 7 ] 0 ]   ->   9

How the data are derived (nothing is downloaded; every example comes from this generator): the
procedure is LRA's ``lra_benchmarks/data/listops.py``, re-implemented here on Python's seeded
``random.Random``:

- a node at depth ``t < max_depth`` is an operator with probability ``0.25`` (LRA's ``VALUE_P``)
  and otherwise a uniformly drawn digit; at ``max_depth`` it is always a digit;
- an operator is drawn uniformly from the four, with ``randint(2, max_args)`` arguments, each a
  node one level deeper;
- a tree is kept when its token count ``L`` (operators, digits and closing brackets; LRA's input
  pipeline drops the parentheses of its TSV files) satisfies ``min_length < L < max_length``, and
  when it is not a duplicate (LRA keeps a set of trees).

LRA's settings are the defaults: ``max_depth = 10``, ``max_args = 10``, lengths 500-2000. The
label is computed by :func:`evaluate`, i.e. ``min``, ``max``, ``int(median)``, ``sum % 10``
applied bottom-up, as LRA's ``to_value``. The split sizes LRA used are 96,000 / 2,000 / 2,000;
this module draws any number, and splitting one stream (:func:`generate_listops`) keeps the
splits disjoint.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

#: the four list operators (LRA's MIN, MAX, MED, SUM_MOD), in LRA's order
OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
CLOSE = "]"
DIGITS = tuple(str(d) for d in range(10))
#: token ids: 0 is padding, 1 a classification token a model may prepend, then the 15 symbols
VOCABULARY = ("<pad>", "<cls>", *OPERATORS, CLOSE, *DIGITS)
PAD, CLS = 0, 1
NUM_CLASSES = 10
#: probability that a node above ``max_depth`` is an operator (LRA's ``VALUE_P``)
OPERATOR_PROBABILITY = 0.25

#: a digit, or ``(operator, arguments)``
Tree: TypeAlias = "int | tuple[str, tuple[Tree, ...]]"

_IDS = {token: i for i, token in enumerate(VOCABULARY)}


@dataclass(frozen=True)
class ListOpsExample:
    """One expression: its tokens (no parentheses) and its value ``label`` in ``0..9``."""

    tokens: tuple[str, ...]
    label: int


def generate_tree(
    rng: random.Random, depth: int = 1, max_depth: int = 10, max_args: int = 10
) -> tuple[Tree, int]:
    """One random expression tree and its token count, by LRA's recursive procedure.

    Args:
        rng: the random source (consumed in LRA's order: the operator-or-digit draw, then the
            digit or the argument count, the arguments, and last the operator).
        depth: the depth of this node (the root is 1).
        max_depth: nodes at this depth are digits.
        max_args: the most arguments of one operator (at least 2).

    Returns:
        ``(tree, length)`` where ``length`` counts operators, digits and closing brackets.
    """
    if depth < max_depth and rng.random() <= OPERATOR_PROBABILITY:
        count = rng.randint(2, max_args)
        arguments = []
        length = 2  # the operator and its closing bracket
        for _ in range(count):
            child, child_length = generate_tree(rng, depth + 1, max_depth, max_args)
            arguments.append(child)
            length += child_length
        return (rng.choice(OPERATORS), tuple(arguments)), length
    return rng.choice(range(10)), 1


def evaluate(tree: Tree) -> int:
    """The value of an expression tree: ``min``, ``max``, median rounded down (LRA's
    ``int(np.median(...))``), or sum modulo 10 of the arguments' values."""
    if isinstance(tree, int):
        return tree
    operator, arguments = tree
    values = [evaluate(a) for a in arguments]
    if operator == "[MIN":
        return min(values)
    if operator == "[MAX":
        return max(values)
    if operator == "[MED":
        return int(statistics.median(values))  # an even count averages two: x.5 rounds down
    if operator == "[SM":
        return sum(values) % 10
    raise ValueError(f"unknown operator {operator!r}; expected one of {OPERATORS}")


def to_tokens(tree: Tree) -> tuple[str, ...]:
    """The prefix tokens of a tree: ``("[MAX", "2", "9", "]")``."""
    if isinstance(tree, int):
        return (str(tree),)
    operator, arguments = tree
    out: list[str] = [operator]
    for argument in arguments:
        out.extend(to_tokens(argument))
    out.append(CLOSE)
    return tuple(out)


def parse(tokens: Sequence[str] | str) -> Tree:
    """The tree of a token sequence (or a space-separated string); inverse of :func:`to_tokens`."""
    items = tokens.split() if isinstance(tokens, str) else list(tokens)
    tree, end = _parse_at(items, 0)
    if end != len(items):
        raise ValueError(f"expected one expression, got {len(items) - end} tokens after it")
    return tree


def _parse_at(items: list[str], i: int) -> tuple[Tree, int]:
    if i >= len(items):
        raise ValueError("expected a digit or an operator, got the end of the expression")
    token = items[i]
    if token in DIGITS:
        return int(token), i + 1
    if token not in OPERATORS:
        raise ValueError(f"expected a digit or one of {OPERATORS}, got {token!r} at {i}")
    arguments = []
    i += 1
    while i < len(items) and items[i] != CLOSE:
        child, i = _parse_at(items, i)
        arguments.append(child)
    if i >= len(items):
        raise ValueError(f"expected {CLOSE!r} closing {token!r}, got the end of the expression")
    return (token, tuple(arguments)), i + 1


def generate_listops(
    num_examples: int,
    seed: int = 0,
    *,
    min_length: int = 500,
    max_length: int = 2000,
    max_depth: int = 10,
    max_args: int = 10,
) -> list[ListOpsExample]:
    """``num_examples`` distinct ListOps expressions with ``min_length < length < max_length``
    tokens, by LRA's rejection sampling (see the module doc); the same ``seed`` gives the same
    list, and a longer list from the same seed starts with the shorter one.

    Args:
        num_examples: how many examples.
        seed: seed of the ``random.Random`` stream.
        min_length, max_length: exclusive token-count bounds (LRA: 500, 2000).
        max_depth: tree depth limit (LRA: 10).
        max_args: arguments per operator, at most (LRA: 10).

    Returns:
        list of :class:`ListOpsExample`.

    Example:
        >>> examples = generate_listops(2, seed=0, min_length=10, max_length=40)
        >>> all(10 < len(e.tokens) < 40 for e in examples)
        True
    """
    for name, value in (
        ("num_examples", num_examples),
        ("seed", seed),
        ("min_length", min_length),
        ("max_length", max_length),
        ("max_depth", max_depth),
        ("max_args", max_args),
    ):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if num_examples < 0:
        raise ValueError(f"num_examples must be >= 0, got {num_examples}")
    if max_args < 2 or max_depth < 2:
        raise ValueError(f"expected max_args >= 2 and max_depth >= 2, got {max_args}, {max_depth}")
    if not 0 <= min_length < max_length - 1:
        raise ValueError(
            f"expected 0 <= min_length < max_length - 1, got {min_length}, {max_length}"
        )
    # the longest possible tree: every node an operator with max_args arguments down to max_depth
    largest = sum(2 * max_args**t for t in range(max_depth - 1)) + max_args ** (max_depth - 1)
    if min_length + 1 > largest:
        raise ValueError(
            f"no tree with max_depth={max_depth}, max_args={max_args} has more than "
            f"{min_length} tokens (at most {largest})"
        )
    rng = random.Random(seed)
    seen: set[tuple[str, ...]] = set()
    examples = []
    while len(examples) < num_examples:
        tree, length = generate_tree(rng, 1, max_depth, max_args)
        if not min_length < length < max_length:
            continue
        tokens = to_tokens(tree)
        if tokens in seen:
            continue
        seen.add(tokens)
        examples.append(ListOpsExample(tokens, evaluate(tree)))
    return examples


def encode(tokens: Sequence[str], cls: bool = False) -> list[int]:
    """Token ids in :data:`VOCABULARY` (``PAD = 0``), with ``CLS`` first if ``cls``."""
    try:
        ids = [_IDS[t] for t in tokens]
    except KeyError as error:
        raise ValueError(f"expected tokens of {VOCABULARY[2:]}, got {error.args[0]!r}") from None
    return [CLS, *ids] if cls else ids
