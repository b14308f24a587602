"""Symmetrization of word alignments: combine the links of the two translation directions
(Och & Ney 2003; Koehn, Och & Marcu 2003), as Moses' ``symal`` and fast_align's ``atools`` do.

A directional aligner links every word of its target side to at most one word of its source
side, so it cannot express one-to-many links the other way. Running it both ways and combining
the two link sets recovers them. Both inputs are link sets in ONE orientation, pairs
``(english position, french position)`` (0-based, Pharaoh's ``i-j``, the convention of
:mod:`attnkit.evaluate.alignment`); turn the reverse model's ``(french, english)`` links around
with :func:`transpose_links` first. ``forward`` is the English→French model's links, ``backward``
the French→English model's.

- ``intersection``: ``A ∩ B`` (high precision).
- ``union``: ``A ∪ B`` (high recall).
- ``grow-diag``: start from the intersection; repeatedly add a point of the union that has an
  already-chosen neighbour (the 8 cells around it) and whose English or French word is still
  unaligned, until nothing is added.
- ``grow-diag-final``: ``grow-diag``, then ``final(A)``, then ``final(B)``: add every remaining
  point of ``A`` (then of ``B``) whose English OR French word is still unaligned.
- ``grow-diag-final-and``: the same with ``final-and``: only points whose English AND French
  words are both unaligned.

Order of visits (it matters: adding a point changes which words are aligned): as in ``atools``,
each sweep visits the candidate points in increasing ``(english, french)`` order, checks each
against the alignment as it stands (points added earlier in the sweep count), and sweeps are
repeated until one adds nothing; ``final`` visits the points of ``A``, then of ``B``, in the same
order in a single sweep. Moses' ``symal`` visits points in another order and can differ from this
in rare ties. Always ``intersection ⊆ grow-diag ⊆ grow-diag-final-and ⊆ grow-diag-final ⊆ union``.

Lives in ``attnkit.data`` (it is how a statistical teacher's links are made) and is re-exported by
``attnkit.evaluate``; data is below evaluate in the layer order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

Links = set[tuple[int, int]]

# The 8 neighbours of grow-diag: the 4 adjacent cells, then the 4 diagonal ones.
_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def _checked(links: Iterable[tuple[int, int]], name: str) -> Links:
    if isinstance(links, str):
        raise TypeError(f"{name} must be pairs (english, french), not a str: {links!r:.60}")
    out: Links = set()
    for pair in links:
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            raise ValueError(f"{name}: a link is a pair (english, french), got {pair!r}")
        e, f = pair
        if isinstance(e, bool) or isinstance(f, bool) or not (_is_int(e) and _is_int(f)):
            raise TypeError(f"{name}: link positions must be ints, got {pair!r}")
        if e < 0 or f < 0:
            raise ValueError(f"{name}: link positions must be >= 0, got {pair!r}")
        out.add((int(e), int(f)))
    return out


def _is_int(value: object) -> bool:
    return hasattr(value, "__index__")


def transpose_links(links: Iterable[tuple[int, int]]) -> Links:
    """``{(j, i)}`` for ``{(i, j)}``: a reverse model's ``(french, english)`` links in the
    ``(english, french)`` orientation (or back).

    Args:
        links: ``(i, j)`` pairs.

    Returns:
        The ``(j, i)`` pairs.

    Example::

        >>> sorted(transpose_links({(0, 1), (2, 3)}))
        [(1, 0), (3, 2)]"""
    return {(f, e) for e, f in _checked(links, "links")}


def intersection(forward: Iterable[tuple[int, int]], backward: Iterable[tuple[int, int]]) -> Links:
    """``A ∩ B``: the links both directions agree on.

    Args:
        forward: ``(source, target)`` links of one direction.
        backward: the other direction's, in the same orientation.

    Returns:
        The links in both.

    Example::

        >>> sorted(intersection({(0, 0), (1, 1)}, {(0, 0), (1, 2)}))
        [(0, 0)]
    """
    return _checked(forward, "forward") & _checked(backward, "backward")


def union(forward: Iterable[tuple[int, int]], backward: Iterable[tuple[int, int]]) -> Links:
    """``A ∪ B``: the links of either direction.

    Args:
        forward: ``(source, target)`` links of one direction.
        backward: the other direction's, in the same orientation.

    Returns:
        The links in either.

    Example::

        >>> sorted(union({(0, 0), (1, 1)}, {(0, 0), (1, 2)}))
        [(0, 0), (1, 1), (1, 2)]
    """
    return _checked(forward, "forward") | _checked(backward, "backward")


class _Growing:
    """The alignment being grown and which English/French words it already covers."""

    def __init__(self, start: Links) -> None:
        self.links: Links = set(start)
        self.english = {e for e, _ in start}
        self.french = {f for _, f in start}

    def add(self, point: tuple[int, int]) -> None:
        self.links.add(point)
        self.english.add(point[0])
        self.french.add(point[1])

    def either_unaligned(self, point: tuple[int, int]) -> bool:
        return point[0] not in self.english or point[1] not in self.french

    def both_unaligned(self, point: tuple[int, int]) -> bool:
        return point[0] not in self.english and point[1] not in self.french

    def has_neighbour(self, point: tuple[int, int]) -> bool:
        e, f = point
        return any((e + de, f + df) in self.links for de, df in _NEIGHBOURS)

    def grow_diag(self, candidates: Links) -> None:
        pending = sorted(candidates - self.links)
        added = True
        while added:
            added = False
            for point in pending:
                # Added at once, so the later points of the same sweep see it.
                if self.either_unaligned(point) and self.has_neighbour(point):
                    self.add(point)
                    added = True
            pending = [point for point in pending if point not in self.links]

    def final(self, points: Links, accept: Callable[[tuple[int, int]], bool]) -> None:
        for point in sorted(points - self.links):
            if accept(point):
                self.add(point)


def grow_diag(forward: Iterable[tuple[int, int]], backward: Iterable[tuple[int, int]]) -> Links:
    """Koehn et al.'s ``grow-diag``: the intersection grown into the union through the 8
    neighbours of chosen points, adding a point only if its English or French word is unaligned.

    Args:
        forward: ``(source, target)`` links of one direction.
        backward: the other direction's, in the same orientation.

    Returns:
        The symmetrized links.

    Example::

        >>> sorted(grow_diag({(0, 0), (1, 1)}, {(0, 0), (1, 2), (1, 1)}))
        [(0, 0), (1, 1), (1, 2)]
    """
    a, b = _checked(forward, "forward"), _checked(backward, "backward")
    state = _Growing(a & b)
    state.grow_diag(a | b)
    return state.links


def grow_diag_final(
    forward: Iterable[tuple[int, int]], backward: Iterable[tuple[int, int]]
) -> Links:
    """``grow-diag``, then every point of ``forward``, then of ``backward``, whose English or
    French word is still unaligned (Koehn et al.'s ``final``).

    Args:
        forward: ``(source, target)`` links of one direction.
        backward: the other direction's, in the same orientation.

    Returns:
        The symmetrized links.

    Example::

        >>> sorted(grow_diag_final({(0, 0), (1, 1)}, {(0, 0), (1, 2), (1, 1)}))
        [(0, 0), (1, 1), (1, 2)]"""
    a, b = _checked(forward, "forward"), _checked(backward, "backward")
    state = _Growing(a & b)
    state.grow_diag(a | b)
    state.final(a, state.either_unaligned)
    state.final(b, state.either_unaligned)
    return state.links


def grow_diag_final_and(
    forward: Iterable[tuple[int, int]], backward: Iterable[tuple[int, int]]
) -> Links:
    """``grow-diag``, then every point of ``forward``, then of ``backward``, whose English and
    French words are both still unaligned (``final-and``, Moses' default).

    Args:
        forward: ``(source, target)`` links of one direction.
        backward: the other direction's, in the same orientation.

    Returns:
        The symmetrized links.

    Example::

        >>> sorted(grow_diag_final_and({(0, 0), (1, 1)}, {(0, 0), (1, 2), (1, 1)}))
        [(0, 0), (1, 1), (1, 2)]"""
    a, b = _checked(forward, "forward"), _checked(backward, "backward")
    state = _Growing(a & b)
    state.grow_diag(a | b)
    state.final(a, state.both_unaligned)
    state.final(b, state.both_unaligned)
    return state.links


SYMMETRIZATIONS: dict[str, Callable[[Iterable[tuple[int, int]], Iterable[tuple[int, int]]], Links]]
SYMMETRIZATIONS = {
    "intersection": intersection,
    "union": union,
    "grow-diag": grow_diag,
    "grow-diag-final": grow_diag_final,
    "grow-diag-final-and": grow_diag_final_and,
}


def symmetrize(
    forward: Iterable[tuple[int, int]],
    backward: Iterable[tuple[int, int]],
    method: str = "grow-diag-final-and",
) -> Links:
    """Combine the links of both translation directions of one sentence pair.

    Args:
        forward: the English→French model's links ``(english, french)``, 0-based.
        backward: the French→English model's links, already as ``(english, french)`` (see
            :func:`transpose_links`).
        method: one of :data:`SYMMETRIZATIONS`: ``"intersection"``, ``"union"``,
            ``"grow-diag"``, ``"grow-diag-final"``, ``"grow-diag-final-and"``.

    Returns:
        The symmetrized links ``(english, french)``.

    Example::

        >>> sorted(symmetrize({(0, 0), (1, 1)}, {(0, 0), (1, 1), (2, 1)}, "intersection"))
        [(0, 0), (1, 1)]
    """
    if method not in SYMMETRIZATIONS:
        raise ValueError(f"method must be one of {sorted(SYMMETRIZATIONS)}, got {method!r}")
    return SYMMETRIZATIONS[method](forward, backward)
