"""Example: links are checked against the sentence lengths and S ⊆ P."""

import pytest

from attnkit.data import Example


def test_valid_example():
    example = Example(
        ("a", "b"), ("x",), sure=frozenset({(1, 0)}), possible=frozenset({(0, 0), (1, 0)})
    )
    assert example.links is None and (1, 0) in example.possible


def test_invalid_examples_are_rejected():
    with pytest.raises(TypeError, match=r"Example.source must be a tuple of str, got \['a'\]"):
        Example(["a"], ("x",))
    with pytest.raises(
        ValueError, match=r"link \(2, 0\) outside the sentence lengths \(source 2, target 1\)"
    ):
        Example(("a", "b"), ("x",), links=frozenset({(2, 0)}))
    with pytest.raises(
        ValueError, match=r"possible must include every sure link; missing \[\(0, 0\)\]"
    ):
        Example(("a",), ("x",), sure=frozenset({(0, 0)}), possible=frozenset())
    with pytest.raises(TypeError, match=r"frozenset .* got set"):
        Example(("a",), ("x",), links={(0, 0)})
