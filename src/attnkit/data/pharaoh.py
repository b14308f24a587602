"""Pharaoh word-alignment lines: ``0-0 1-2 2?1`` (Koehn's format, used by the Hansards gold and
by statistical aligners).

A token ``i-j`` is a *sure* link, ``i?j`` or ``ipj`` a *possible*-only one (Och & Ney 2003);
``i`` is the source position and ``j`` the target position, both 0-based. Links are the pairs
``(source, target)`` that :mod:`attnkit.evaluate.alignment` scores.

    >>> parse_pharaoh("0-0 1?2")
    ({(0, 0)}, {(0, 0), (1, 2)})
    >>> format_pharaoh({(1, 2), (0, 0)})
    '0-0 1-2'
"""

from __future__ import annotations

import re
from collections.abc import Iterable

Links = set[tuple[int, int]]
_POSITION = re.compile(r"[0-9]+")


def parse_pharaoh(line: str) -> tuple[Links, Links]:
    """``(sure, possible)`` links of one Pharaoh line: ``i-j`` sure, ``i?j`` or ``ipj``
    possible-only. ``possible`` includes the sure links (``S ⊆ P``).

    Args:
        line: whitespace-separated links; an empty line has no links.

    Returns:
        two sets of ``(source, target)`` pairs.

    Raises:
        ValueError: a token that is not ``i-j``, ``i?j`` or ``ipj`` with integer positions.

    Example::

        >>> sure, possible = parse_pharaoh("0-0 1?1")
        >>> sorted(sure), sorted(possible)
        ([(0, 0)], [(0, 0), (1, 1)])
    """
    sure: Links = set()
    possible: Links = set()
    for token in line.split():
        sep = next((c for c in "-?p" if c in token), None)
        left, _, right = token.partition(sep or " ")
        # positions are non-negative decimal integers: int() would also take "+1", "1_0", "١"
        if sep is None or not (_POSITION.fullmatch(left) and _POSITION.fullmatch(right)):
            raise ValueError(
                f"not a Pharaoh link (i-j, i?j or ipj, 0-based integer positions): {token!r}"
            )
        link = (int(left), int(right))
        possible.add(link)
        if sep == "-":
            sure.add(link)
    return sure, possible


def format_pharaoh(links: Iterable[tuple[int, int]]) -> str:
    """One Pharaoh line of sure links ``i-j``, sorted by source then target position.

    Args:
        links: ``(source, target)`` pairs of non-negative integers.

    Returns:
        e.g. ``"0-0 1-2"``; ``""`` for no links. :func:`parse_pharaoh` reads it back.
    """
    pairs = sorted((int(s), int(t)) for s, t in links)
    for s, t in pairs:
        if s < 0 or t < 0:
            raise ValueError(f"a Pharaoh link has non-negative positions, got ({s}, {t})")
    return " ".join(f"{s}-{t}" for s, t in pairs)
