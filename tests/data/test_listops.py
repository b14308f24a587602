"""ListOps generator: checked against an independent evaluator written here (a stack machine over
the token string, not the module's recursive tree code), hand-computed values, and LRA's limits."""

from __future__ import annotations

import math

import pytest

from attnkit.data import listops
from attnkit.data.listops import evaluate, generate_listops, parse


def stack_value(tokens: tuple[str, ...]) -> int:
    """Evaluate prefix ListOps with an explicit stack: push operators, fold at each ']'."""
    stack: list[object] = []
    for token in tokens:
        if token == "]":
            args: list[int] = []
            while not isinstance(stack[-1], str):
                args.append(stack.pop())  # type: ignore[arg-type]
            op = stack.pop()
            args.sort()
            if op == "[MIN":
                stack.append(args[0])
            elif op == "[MAX":
                stack.append(args[-1])
            elif op == "[MED":
                m = len(args)
                mid = args[m // 2] if m % 2 else (args[m // 2 - 1] + args[m // 2]) / 2
                stack.append(math.floor(mid))
            elif op == "[SM":
                stack.append(sum(args) % 10)
            else:
                raise AssertionError(op)
        elif token.startswith("["):
            stack.append(token)
        else:
            stack.append(int(token))
    assert len(stack) == 1
    return stack[0]  # type: ignore[return-value]


def shape(tokens: tuple[str, ...]) -> tuple[int, int]:
    """(depth, most arguments of one operator), counted on the tokens."""
    depth = deepest = 0
    counts: list[int] = []
    most = 0
    for token in tokens:
        if token == "]":
            most = max(most, counts.pop())
            depth -= 1
            continue
        if counts:
            counts[-1] += 1
        if token.startswith("["):
            depth += 1
            counts.append(0)
        deepest = max(deepest, depth + (0 if token.startswith("[") else 1))
    return deepest, most


@pytest.fixture(scope="module")
def examples():
    return generate_listops(60, seed=3)


def test_hand_computed_values():
    assert evaluate(parse("[MAX 2 9 [MIN 4 7 ] 0 ]")) == 9  # the LRA paper's example
    assert evaluate(parse("[MED 3 4 ]")) == 3  # 3.5 rounded down, as int(np.median)
    assert evaluate(parse("[MED 1 9 2 ]")) == 2
    assert evaluate(parse("[SM 5 7 9 ]")) == 1
    assert evaluate(parse("[MIN [SM 9 9 ] [MAX 3 1 ] ]")) == 3


def test_labels_match_an_independent_evaluator(examples):
    for e in examples:
        assert e.label == stack_value(e.tokens)
        assert 0 <= e.label <= 9


def test_lra_limits(examples):
    ops = set()
    for e in examples:
        assert 500 < len(e.tokens) < 2000
        depth, most = shape(e.tokens)
        assert depth <= 10
        assert 2 <= most <= 10
        assert set(e.tokens) <= set(listops.VOCABULARY[2:])
        ops |= {t for t in e.tokens if t.startswith("[")}
    assert ops == {"[MIN", "[MAX", "[MED", "[SM"}
    assert len({e.tokens for e in examples}) == len(examples)  # no duplicates


def test_deterministic_by_seed_and_prefix_stable(examples):
    again = generate_listops(20, seed=3)
    assert again == examples[:20]
    other = generate_listops(20, seed=4)
    assert other != again


def test_short_settings_and_encoding():
    small = generate_listops(30, seed=0, min_length=5, max_length=30, max_depth=4, max_args=3)
    for e in small:
        assert 5 < len(e.tokens) < 30
        depth, most = shape(e.tokens)
        assert depth <= 4 and most <= 3
        assert e.label == stack_value(e.tokens)
    ids = listops.encode(("[MAX", "2", "]"), cls=True)
    assert ids == [listops.CLS, 3, 9, 6]
    assert [listops.VOCABULARY[i] for i in ids[1:]] == ["[MAX", "2", "]"]


def test_bad_input():
    with pytest.raises(ValueError, match="min_length"):
        generate_listops(1, min_length=100, max_length=50)
    with pytest.raises(ValueError, match="max_args"):
        generate_listops(1, max_args=1)
    with pytest.raises(ValueError, match="at most"):
        generate_listops(1, min_length=100, max_length=200, max_depth=2, max_args=3)
    with pytest.raises(TypeError, match="num_examples"):
        generate_listops(2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected"):
        listops.encode(["[FIRST"])
    with pytest.raises(ValueError, match="closing"):
        parse("[MAX 1 2")
