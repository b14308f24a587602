"""Aspect-based sentiment sets: the README's counts, the polarity distributions, the sentence
rebuilt from (left, target, right), and one-line errors."""

import collections

import pytest

from attnkit.data.absa import DATASETS, AspectExample, load_absa, read_aspect_file, split_sentence

# README: train / test examples
COUNTS = {
    "semeval14-restaurants": (3608, 1120),
    "semeval14-laptops": (2328, 638),
    "semeval2015": (1279, 597),
    "semeval2016": (1879, 650),
    "twitter": (6248, 692),
}
# (negative, neutral, positive) per split. SemEval-2014 and Twitter: the distributions of the
# ABSA literature's tables (e.g. Twitter 25/50/25 % by construction, Dong et al. 2014's readme).
POLARITY = {
    "semeval14-restaurants": ((807, 637, 2164), (196, 196, 728)),
    "semeval14-laptops": ((870, 464, 994), (128, 169, 341)),
    "semeval2015": ((280, 36, 963), (207, 37, 353)),
    "semeval2016": ((488, 72, 1319), (135, 32, 483)),
    "twitter": ((1560, 3127, 1561), (173, 346, 173)),
}


@pytest.fixture(scope="module")
def root(shared_data):
    path = shared_data / "absa"
    if not path.is_dir():
        pytest.skip(f"the shared data pack has no absa folder ({path})")
    return path


@pytest.fixture(scope="module")
def datasets(root):
    return {name: load_absa(root, name) for name in DATASETS}


def _blocks(path):
    """The file's (sentence, target, polarity) triples, read independently of the loader."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("cp1252")
    lines = text.replace("\r\n", "\n").rstrip("\n").split("\n")
    return list(zip(lines[0::3], lines[1::3], lines[2::3], strict=True))


def test_counts_match_the_readme(datasets):
    for name, (train, test) in COUNTS.items():
        assert (len(datasets[name]["train"]), len(datasets[name]["test"])) == (train, test), name


def test_polarity_distributions(root, datasets):
    for name, expected in POLARITY.items():
        for split, counts, file in zip(("train", "test"), expected, DATASETS[name], strict=True):
            labels = [e.label for e in datasets[name][split]]
            assert tuple(labels.count(c) for c in range(3)) == counts, (name, split)
            # independent: the polarity lines of the file
            polarities = [p.strip() for _, _, p in _blocks(root / file)]
            assert [int(p) + 1 for p in polarities] == labels


def test_sentences_are_rebuilt(root, datasets):
    for name, files in DATASETS.items():
        for split, file in zip(("train", "test"), files, strict=True):
            for example, (sentence, target, _) in zip(
                datasets[name][split], _blocks(root / file), strict=True
            ):
                assert example.target == tuple(target.split())
                written_back = sentence.replace("$T$", target.strip())
                assert "".join(example.tokens) == "".join(written_back.split())


def test_known_examples(datasets):
    first = datasets["semeval14-restaurants"]["test"][0]
    assert first == AspectExample(("The",), ("bread",), tuple("is top notch as well .".split()), 2)
    assert first.polarity == "positive"
    seafood = [e for e in datasets["semeval2015"]["test"] if "seafood" in e.right]
    assert seafood[0].left == ("good",) and seafood[0].target == ("food",)
    # Twitter: the first of two mentions is the target, the second is written back
    shaq = datasets["twitter"]["test"][0]
    assert shaq.left == () and shaq.target == ("shaquille", "o'neal")
    assert shaq.right[:3] == ("to", "miss", "3rd") and "o'neal" in shaq.right
    assert shaq.polarity == "negative"


def test_target_glued_to_punctuation():
    assert split_sentence("the $T$- relaxed .", "decor") == ("the ", "- relaxed .")
    assert split_sentence("sea$T$ and $T$ , more $T$ .", "food") == (
        "seafood and ",
        " , more food .",
    )
    assert split_sentence("the $T$ing was long", "wait") is None


def test_lowercase_and_validation_hold_out(root, datasets):
    lowered = load_absa(root, "semeval14-laptops", lowercase=True)
    for plain, low in zip(datasets["semeval14-laptops"]["test"], lowered["test"], strict=True):
        assert low.tokens == tuple(t.lower() for t in plain.tokens) and low.label == plain.label
    split = load_absa(root, "semeval2015", valid_fraction=0.1, seed=0)
    assert (len(split["train"]), len(split["valid"])) == (1151, 128)
    train = datasets["semeval2015"]["train"]
    assert collections.Counter(split["train"] + split["valid"]) == collections.Counter(train)
    for part in (split["train"], split["valid"]):  # each part keeps the file order
        remaining = iter(train)
        assert all(example in remaining for example in part)
    again = load_absa(root, "semeval2015", valid_fraction=0.1, seed=0)
    other = load_absa(root, "semeval2015", valid_fraction=0.1, seed=1)
    assert again["valid"] == split["valid"] and other["valid"] != split["valid"]


@pytest.mark.parametrize(
    ("content", "line", "expected"),
    [
        ("the $T$ is good .\nfood\n1\nthe $T$ is bad .\nservice\nconflict\n", 6, "a polarity"),
        ("the $T$ is good .\nfood\n1\nthe food is bad .\nservice\n-1\n", 4, "$T$ marking"),
        ("the $T$ is good .\nfood\n1\nthe $T$ is bad .\n \n-1\n", 5, "expected the target"),
        ("the $T$ is good .\nfood\n1\nthe $T$ is bad .\nservice\n", 5, "3 lines per example"),
    ],
)
def test_malformed_file_names_file_and_line(tmp_path, content, line, expected):
    path = tmp_path / "Restaurants_Train.xml.seg"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError) as error:
        read_aspect_file(path)
    message = str(error.value)
    assert message.startswith(f"{path}: line {line}: expected") and expected in message
    assert "\n" not in message


def test_encodings_missing_file_and_bad_name(tmp_path):
    path = tmp_path / "300testdata2016.txt"
    path.write_bytes(b"caf\xe9 $T$ \x96 ok\r\nfood\r\n1\r\n")  # Windows-1252, CRLF
    (example,) = read_aspect_file(path)
    assert example.left == ("café",) and example.right == ("–", "ok") and example.label == 2
    path.write_bytes(b"fine $T$\nfood\n1\nbad \x81 $T$\nfood\n1\n")  # neither encoding
    with pytest.raises(ValueError, match=r"line 4: expected UTF-8 or Windows-1252 text"):
        read_aspect_file(path)
    with pytest.raises(FileNotFoundError, match=r"twitter/train\.raw"):
        load_absa(tmp_path, "twitter")
    with pytest.raises(ValueError, match="name must be one of"):
        load_absa(tmp_path, "semeval2017")
