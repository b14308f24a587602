"""Stanford Sentiment Treebank (Socher et al. 2013), sentence level: SST-5 and SST-2.

Files: ``trees/{train,dev,test}.txt`` (8,544 / 1,101 / 2,210 lines), one sentence a line as a
binarised PTB tree whose every node carries a sentiment label 0–4 (very negative … very
positive)::

    (3 (2 It) (4 (4 (2 's) (4 (3 (2 a) (4 (3 lovely) (2 film))) ...

A sentence example is the tree's leaves and its root label:

* **SST-5**: the root label 0–4, every sentence (8,544 / 1,101 / 2,210);
* **SST-2**: neutral roots (2) dropped, 0–1 → 0 negative, 3–4 → 1 positive (6,920 / 872 /
  1,821).

**Phrase level** (``phrases=True``, Kim's (2014) protocol for SST: "trained on both phrases and
sentences, but only score on sentences at test time"): the training split holds every labelled
node of the training trees — each distinct phrase once (its tokens as loaded, so lower-cased ones
with ``lowercase=True``), labelled by its first occurrence, in file order, the whole sentences
among them; SST-2 drops the neutral phrases. On the lower-cased tokens: SST-5 156,817 phrases
and SST-2 76,961 (the size of ``stsa.binary.phrases.train`` of Kim's companion code). The
validation and test splits stay whole sentences.

Tokens are the leaves, with the PTB escapes resolved: ``-LRB-`` ``(``, ``-RRB-`` ``)``
(``-LSB-``/``-RSB-``/``-LCB-``/``-RCB-`` likewise), ``\\/`` ``/`` and ``\\*`` ``*``; the PTB quotes
`````` and ``''`` stay as they are (GloVe has them). ``dev`` is the ``"valid"`` split.
"""

from __future__ import annotations

import re
from pathlib import Path

from attnkit.data.sentence_classification import SentenceExample

FILES = {"train": "train.txt", "valid": "dev.txt", "test": "test.txt"}
SST5_LABELS = ("very negative", "negative", "neutral", "positive", "very positive")
SST2_LABELS = ("negative", "positive")
_BRACKETS = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}"}
_ESCAPED = re.compile(r"\\([/*])")  # \/ and \* of the PTB
# Only ASCII spaces separate: a leaf may hold a no-break space ("8\u00a01\\/2", Fellini's film).
_TREE_TOKEN = re.compile(r"\(|\)|[^ \t\r\n()]+")


def unescape_ptb(token: str) -> str:
    """A PTB leaf as plain text: ``-LRB-`` → ``(``, ``1\\/2`` → ``1/2``, ``\\*`` → ``*``."""
    return _BRACKETS.get(token, None) or _ESCAPED.sub(r"\1", token)


def parse_tree(text: str) -> tuple[int, tuple[str, ...]]:
    """``(root label, leaves)`` of one PTB sentiment tree (leaves unescaped, not lower-cased).

    Every node must be ``(LABEL word)`` or ``(LABEL child child …)`` with ``LABEL`` in 0–4.

    Raises:
        ValueError: one line saying what was expected where (no file or line: the caller adds
            them).
    """
    root_label, leaves, _ = _parse(text)
    return root_label, leaves


def parse_phrases(text: str) -> list[tuple[int, tuple[str, ...]]]:
    """``(label, leaves)`` of every node of one PTB sentiment tree, each node's leaves being the
    words it spans, in the order the nodes close (children before their parent, the root last).

    Raises:
        ValueError: as :func:`parse_tree`.
    """
    _, leaves, spans = _parse(text)
    return [(label, leaves[start:end]) for label, start, end in spans]


def _parse(text: str) -> tuple[int, tuple[str, ...], list[tuple[int, int, int]]]:
    """``(root label, leaves, spans)``: ``spans`` holds ``(label, first leaf, end leaf)`` of
    every node in closing order."""
    stack: list[list] = []  # open nodes: [label, has_children, has_word, first leaf]
    spans: list[tuple[int, int, int]] = []
    leaves: list[str] = []
    root_label: int | None = None
    tokens = _TREE_TOKEN.findall(text)
    position = 0
    while position < len(tokens):
        token = tokens[position]
        position += 1
        if root_label is not None:
            raise ValueError(f"expected the end of the line after the root's ')', got {token!r}")
        if token == "(":
            label = tokens[position] if position < len(tokens) else "end of line"
            position += 1
            if label not in ("0", "1", "2", "3", "4"):
                raise ValueError(f"expected a label 0-4 after '(', got {label!r}")
            if stack:
                if stack[-1][2]:
                    raise ValueError(
                        "expected ')' after a word, got '(' (a node has a word or children)"
                    )
                stack[-1][1] = True
            stack.append([int(label), False, False, len(leaves)])
        elif token == ")":
            if not stack:
                raise ValueError("expected '(' to open the tree, got ')' (unbalanced brackets)")
            label, has_children, has_word, first = stack.pop()
            if not (has_children or has_word):
                raise ValueError(f"expected a word or children in the node labelled {label}")
            spans.append((label, first, len(leaves)))
            if not stack:
                root_label = label
        else:
            if not stack:
                raise ValueError(f"expected '(' to open the tree, got {token!r}")
            if stack[-1][1] or stack[-1][2]:
                raise ValueError(
                    f"expected '(' or ')' (a node holds one word or child nodes), got {token!r}"
                )
            stack[-1][2] = True
            leaves.append(unescape_ptb(token))
    if stack:
        raise ValueError(
            f"expected {len(stack)} more ')' at the end of the line (unbalanced brackets)"
        )
    if root_label is None:
        raise ValueError("expected a tree '(LABEL ...)', got an empty line")
    return root_label, tuple(leaves), spans


def read_trees(
    path: str | Path, lowercase: bool = False, phrases: bool = False
) -> list[tuple[int, tuple[str, ...]]]:
    """``(root label, tokens)`` of every tree of a file, in order; with ``phrases``, the
    ``(label, tokens)`` of every node of every tree (:func:`parse_phrases`), tree after tree.

    Raises:
        FileNotFoundError: naming the file.
        ValueError: one line naming the file, the line number and what was expected.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SST file not found: {path}")
    lines = path.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    trees = []
    for number, line in enumerate(lines, start=1):
        try:
            nodes = parse_phrases(line) if phrases else [parse_tree(line)]
        except ValueError as error:
            raise ValueError(f"{path}: line {number}: {error}") from None
        for label, leaves in nodes:
            trees.append((label, tuple(t.lower() for t in leaves) if lowercase else leaves))
    return trees


def _sst2_label(label: int) -> int | None:
    return None if label == 2 else int(label > 2)


def load_sst(
    root: str | Path, classes: int = 5, lowercase: bool = False, phrases: bool = False
) -> dict[str, list[SentenceExample]]:
    """SST sentences: ``{"train", "valid", "test"}`` lists of :class:`SentenceExample`.

    Args:
        root: the ``sst`` directory (holding ``trees/``) or ``trees/`` itself.
        classes: 5 (SST-5, labels index :data:`SST5_LABELS`) or 2 (SST-2, neutral sentences
            dropped, labels index :data:`SST2_LABELS`).
        lowercase: lower-case the tokens (the trees keep the text's case).
        phrases: the training split is every distinct labelled phrase of the training trees
            (Kim's protocol, see the module docstring); validation and test stay sentences.
    """
    if classes not in (2, 5) or isinstance(classes, bool):
        raise ValueError(f"classes must be 2 (SST-2) or 5 (SST-5), got {classes!r}")
    root = Path(root)
    directory = root / "trees" if (root / "trees").is_dir() else root
    splits: dict[str, list[SentenceExample]] = {}
    for split, name in FILES.items():
        examples = []
        seen: set[tuple[str, ...]] = set()
        every_node = phrases and split == "train"
        for label, tokens in read_trees(directory / name, lowercase, phrases=every_node):
            if every_node:
                # a phrase recurs in many trees with one label (the treebank labels phrases,
                # not occurrences): once each, as Kim's phrase file has it
                if tokens in seen:
                    continue
                seen.add(tokens)
            kept = label if classes == 5 else _sst2_label(label)
            if kept is not None:
                examples.append(SentenceExample(tokens, kept))
        splits[split] = examples
    return splits


__all__ = [
    "SST2_LABELS",
    "SST5_LABELS",
    "load_sst",
    "parse_phrases",
    "parse_tree",
    "read_trees",
    "unescape_ptb",
]
