"""SST sentence and phrase level: counts of the README, leaves and root labels against an
independent regular-expression reading of the trees, every labelled phrase against a reading of
the brackets written here, and one-line errors."""

import collections
import re

import pytest

from attnkit.data.sst import load_sst, parse_phrases, parse_tree, read_trees, unescape_ptb

SST5 = {"train": 8544, "valid": 1101, "test": 2210}
SST2 = {"train": 6920, "valid": 872, "test": 1821}
FILES = {"train": "train.txt", "valid": "dev.txt", "test": "test.txt"}
# a leaf node is "(LABEL word)": a label, a space, then no bracket up to its ")"
LEAF = re.compile(r"\([0-4] ([^()]+)\)")
PTB = {"-LRB-": "(", "-RRB-": ")", r"\/": "/", r"\*": "*"}
# the distinct lower-cased phrases of the training trees (counted with this file's reading)
PHRASES = {5: 156817, 2: 76961}


@pytest.fixture(scope="module")
def root(shared_data):
    path = shared_data / "sst"
    if not path.is_dir():
        pytest.skip(f"the shared data pack has no sst folder ({path})")
    return path


@pytest.fixture(scope="module")
def lines(root):
    return {
        split: (root / "trees" / name).read_text(encoding="utf-8").splitlines()
        for split, name in FILES.items()
    }


@pytest.fixture(scope="module")
def sst5(root):
    return load_sst(root, classes=5)


@pytest.fixture(scope="module")
def sst2(root):
    return load_sst(root, classes=2)


def _reference_leaves(line):
    leaves = []
    for leaf in LEAF.findall(line):
        for escaped, plain in PTB.items():
            leaf = leaf.replace(escaped, plain)
        leaves.append(leaf)
    return tuple(leaves)


def _reference_phrases(line):
    """``(label, leaves)`` of every node: a node opens at "(LABEL", its leaves are those read
    until its ")"."""
    nodes, opened, leaves = [], [], []
    for token in re.findall(r"\([0-4] |\)|[^ ()]+", line):
        if token.startswith("("):
            opened.append((int(token[1]), len(leaves)))
        elif token == ")":
            label, first = opened.pop()
            nodes.append((label, tuple(leaves[first:])))
        else:
            leaves.append(token)
    unescaped = {leaf: _reference_leaves(f"(2 {leaf})")[0] for _, span in nodes for leaf in span}
    return [(label, tuple(unescaped[t] for t in span)) for label, span in nodes]


def test_counts_match_the_readme(sst5, sst2):
    assert {split: len(examples) for split, examples in sst5.items()} == SST5
    assert {split: len(examples) for split, examples in sst2.items()} == SST2


def test_labels_are_the_roots(sst5, sst2, lines):
    for split, examples in sst5.items():
        roots = [int(line[1]) for line in lines[split]]  # "(3 (2 ..." → 3
        assert [e.label for e in examples] == roots
        binary = [int(label > 2) for label in roots if label != 2]
        assert [e.label for e in sst2[split]] == binary
    assert sorted(collections.Counter(e.label for e in sst2["test"]).items()) == [
        (0, 912),
        (1, 909),
    ]


def test_tokens_are_the_leaves_unescaped(sst5, lines):
    for split, examples in sst5.items():
        for example, line in zip(examples, lines[split], strict=True):
            assert example.tokens == _reference_leaves(line)
    every = collections.Counter(t for examples in sst5.values() for e in examples for t in e.tokens)
    assert every["("] > 0 and every[")"] > 0 and "1/2" in every
    assert not [t for t in every if t in ("-LRB-", "-RRB-") or "\\" in t]
    first = sst5["train"][0]
    assert first.tokens[:4] == ("The", "Rock", "is", "destined") and first.label == 3


@pytest.mark.parametrize("classes", [5, 2])
def test_phrase_level_trains_on_every_distinct_labelled_phrase(root, lines, classes):
    loaded = load_sst(root, classes=classes, lowercase=True, phrases=True)
    sentences = load_sst(root, classes=classes, lowercase=True)
    assert loaded["valid"] == sentences["valid"] and loaded["test"] == sentences["test"]
    expected, seen = [], set()
    for line in lines["train"]:
        nodes = _reference_phrases(line)
        assert len(nodes) == line.count("(")  # every bracket opens one labelled node
        for label, span in nodes:
            tokens = tuple(t.lower() for t in span)
            if tokens not in seen:
                seen.add(tokens)
                kept = label if classes == 5 else (None if label == 2 else int(label > 2))
                if kept is not None:
                    expected.append((tokens, kept))
    assert [(e.tokens, e.label) for e in loaded["train"]] == expected
    assert len(loaded["train"]) == PHRASES[classes]
    phrases = {e.tokens: e.label for e in loaded["train"]}
    assert all(phrases[e.tokens] == e.label for e in sentences["train"])  # sentences included


def test_lowercase_option(root):
    lowered = read_trees(root / "trees" / "dev.txt", lowercase=True)
    plain = read_trees(root / "trees" / "dev.txt")
    assert [(label, tuple(t.lower() for t in tokens)) for label, tokens in plain] == lowered


def test_parse_tree_and_unescape():
    assert parse_tree("(1 (2 (2 -LRB-) (3 good)) (0 \\/bad))") == (1, ("(", "good", "/bad"))
    assert parse_tree("(4 great)") == (4, ("great",))
    assert unescape_ptb("-RSB-") == "]" and unescape_ptb("\\*\\*") == "**"
    assert unescape_ptb("8\u00a01\\/2") == "8\u00a01/2"  # a no-break space stays inside a leaf
    assert parse_phrases("(1 (2 (2 -LRB-) (3 good)) (0 \\/bad))") == [
        (2, ("(",)),
        (3, ("good",)),
        (2, ("(", "good")),
        (0, ("/bad",)),
        (1, ("(", "good", "/bad")),
    ]


@pytest.mark.parametrize(
    ("tree", "expected"),
    [
        ("(3 (2 a) (4 good)", "expected 1 more ')'"),
        ("(3 (2 a) (4 good)))", "expected the end of the line"),
        ("(3 (2 a) (7 good))", "expected a label 0-4"),
        ("(3 (2 a) (4 ))", "expected a word or children"),
        ("(3 (2 a) (4 good film))", "expected '(' or ')'"),
        ("(3 (2 a) word)", "expected '(' or ')'"),
        ("3 (2 a)", "expected '(' to open the tree"),
        ("", "expected a tree"),
    ],
)
@pytest.mark.parametrize("phrases", [False, True])
def test_malformed_tree_names_file_and_line(tmp_path, tree, expected, phrases):
    path = tmp_path / "dev.txt"
    path.write_text(f"(2 (2 fine) (2 .))\n{tree}\n", encoding="utf-8")
    with pytest.raises(ValueError) as error:
        read_trees(path, phrases=phrases)
    message = str(error.value)
    assert message.startswith(f"{path}: line 2: ")
    assert expected in message and "\n" not in message


def test_missing_file_and_bad_arguments(tmp_path):
    (tmp_path / "trees").mkdir()
    (tmp_path / "trees" / "train.txt").write_text("(2 ok)\n")
    with pytest.raises(FileNotFoundError, match=r"trees/dev\.txt"):
        load_sst(tmp_path)
    with pytest.raises(ValueError, match=r"classes must be 2 \(SST-2\) or 5"):
        load_sst(tmp_path, classes=3)
