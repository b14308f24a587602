"""Aspect-based sentiment benchmarks: SemEval-2014 restaurants and laptops, the HAABSA splits of
SemEval-2015 and 2016 restaurants, and Dong et al.'s (2014) Twitter set, as examples of
``(left context, target, right context, polarity)`` — the input of LCR-Rot (Zheng & Xia 2018) and
LCR-Rot-hop (Wallaart & Frasincar 2019).

Format of every file (despite the ``.xml.seg`` names of the SemEval-2014 files, none is XML):
three lines per example — the sentence with the target replaced by ``$T$``, the target, the
polarity ``-1`` negative, ``0`` neutral or ``1`` positive. The text is already tokenised
(space-separated). Encoding: UTF-8, except HAABSA's ``300traindata2016.txt`` and both HAABSA
test files, which are Windows-1252 (bytes ``0x92`` ’, ``0x96`` –, ``0xe9`` é); a file that is not
UTF-8 is read as Windows-1252. Lines end with ``\\n`` or ``\\r\\n`` (HAABSA).

=========================  ========================================  ===============
name                       files (under the ``absa`` directory)      train / test
=========================  ========================================  ===============
``semeval14-restaurants``  ``semeval14/Restaurants_{Train,Test_Gold}.xml.seg``  3,608 / 1,120
``semeval14-laptops``      ``semeval14/Laptops_{Train,Test_Gold}.xml.seg``      2,328 / 638
``semeval2015``            ``semeval1516/300{train,test}data2015.txt``          1,279 / 597
``semeval2016``            ``semeval1516/300{train,test}data2016.txt``          1,879 / 650
``twitter``                ``twitter/{train,test}.raw``                          6,248 / 692
=========================  ========================================  ===============

Conflict labels: none of these files has one (only ``-1``/``0``/``1``): aspects labelled
*conflict* in the SemEval releases were dropped when these files were made (by ABSA-PyTorch and
HAABSA), as the LCR-Rot and LCR-Rot-hop papers do; a conflict or any other label in a file is an
error here.

Where the target is: the first ``$T$`` standing alone (no letter or digit touching it; the
HAABSA files also write ``$T$..`` or ``$T$-``, whose punctuation becomes a context token). The
HAABSA files replaced *every* occurrence of the target string, also inside words (``sea$T$``
for "seafood" with the target "food", ``$T$ing``), and the Twitter files mark repeated mentions
(``$T$ to miss … : $T$ will miss …``); every ``$T$`` other than the target's is written back as
the target text, so ``left + target + right`` is the sentence (which occurrence was annotated,
the files do not say). Measured, HAABSA 2015 train / 2015 test / 2016 train / 2016 test: 17 / 14
/ 31 / 14 sentences with more than one ``$T$``, 2 / 3 / 5 / 2 of them with one inside a word,
and 3 / 2 / 7 / 3 with the target glued to punctuation; Twitter: 368 training and 38 test
sentences mention their target more than once; SemEval-2014: one ``$T$`` in every sentence.

There is no validation split; ``valid_fraction`` holds out a seeded share of the training
examples (``random.Random(f"absa/{name}/{seed}")``).

The trivial baseline, :func:`majority_baseline`: every test example gets the most frequent class
of the training file. ``python -m attnkit.data.absa [--data DIR]`` prints each benchmark's counts
per class and that baseline's accuracy and macro-F1 on its test set.
"""

from __future__ import annotations

import argparse
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

POLARITIES = ("negative", "neutral", "positive")  # index = label = file polarity + 1
DATASETS = {
    "semeval14-restaurants": (
        "semeval14/Restaurants_Train.xml.seg",
        "semeval14/Restaurants_Test_Gold.xml.seg",
    ),
    "semeval14-laptops": ("semeval14/Laptops_Train.xml.seg", "semeval14/Laptops_Test_Gold.xml.seg"),
    "semeval2015": ("semeval1516/300traindata2015.txt", "semeval1516/300testdata2015.txt"),
    "semeval2016": ("semeval1516/300traindata2016.txt", "semeval1516/300testdata2016.txt"),
    "twitter": ("twitter/train.raw", "twitter/test.raw"),
}
MARKER = "$T$"
_FILE_POLARITY = {"-1": 0, "0": 1, "1": 2}
# a "$T$" with no letter or digit touching it: the target itself, not a word containing it
_STANDALONE = re.compile(r"(?<![^\W_])\$T\$(?![^\W_])")


@dataclass(frozen=True)
class AspectExample:
    """A target phrase in its sentence and the sentiment expressed towards it.

    Attributes:
        left: the tokens before the target.
        target: the target's tokens (an aspect term, or the Twitter entity).
        right: the tokens after the target.
        label: 0 negative, 1 neutral, 2 positive (:data:`POLARITIES`).
    """

    left: tuple[str, ...]
    target: tuple[str, ...]
    right: tuple[str, ...]
    label: int

    @property
    def polarity(self) -> str:
        return POLARITIES[self.label]

    @property
    def tokens(self) -> tuple[str, ...]:
        """The whole sentence, ``left + target + right``."""
        return self.left + self.target + self.right


def _decode(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    try:
        return data.decode("cp1252")
    except UnicodeDecodeError as error:
        number = data[: error.start].count(b"\n") + 1
        raise ValueError(f"{path}: line {number}: expected UTF-8 or Windows-1252 text") from None


def split_sentence(sentence: str, target: str) -> tuple[str, str] | None:
    """``(left text, right text)`` around the target's ``$T$`` in ``sentence``, every other
    ``$T$`` written back as ``target``; ``None`` if no ``$T$`` stands alone."""
    found = _STANDALONE.search(sentence)
    if found is None:
        return None
    left, right = sentence[: found.start()], sentence[found.end() :]
    return left.replace(MARKER, target), right.replace(MARKER, target)


def read_aspect_file(path: str | Path, lowercase: bool = False) -> list[AspectExample]:
    """Every example of a three-lines-per-example file, in file order.

    Args:
        path: the file.
        lowercase: lower-case every token.

    Raises:
        FileNotFoundError: naming the file.
        ValueError: one line naming the file, the line number and what was expected.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"ABSA file not found: {path}")
    lines = [line.rstrip("\r") for line in _decode(path).split("\n")]
    while lines and not lines[-1].strip():
        lines.pop()
    if len(lines) % 3:
        raise ValueError(
            f"{path}: line {len(lines)}: expected 3 lines per example (sentence, target, "
            f"polarity), the file ends after {len(lines) % 3} line(s) of an example"
        )
    examples = []
    for start in range(0, len(lines), 3):
        sentence, target, polarity = lines[start : start + 3]
        if not target.split():
            raise ValueError(f"{path}: line {start + 2}: expected the target, got an empty line")
        if polarity.strip() not in _FILE_POLARITY:
            raise ValueError(
                f"{path}: line {start + 3}: expected a polarity -1, 0 or 1, got {polarity!r:.40}"
            )
        parts = split_sentence(sentence, target.strip())
        if parts is None:
            raise ValueError(
                f"{path}: line {start + 1}: expected a sentence with {MARKER} marking the "
                f"target, got {sentence!r:.60}"
            )
        left, right = parts
        if lowercase:
            left, target, right = left.lower(), target.lower(), right.lower()
        examples.append(
            AspectExample(
                left=tuple(left.split()),
                target=tuple(target.split()),
                right=tuple(right.split()),
                label=_FILE_POLARITY[polarity.strip()],
            )
        )
    return examples


def load_absa(
    root: str | Path,
    name: str,
    lowercase: bool = False,
    valid_fraction: float = 0.0,
    seed: int = 0,
) -> dict[str, list[AspectExample]]:
    """One benchmark of :data:`DATASETS` as ``{"train", "test"}`` (and ``"valid"``) examples.

    Args:
        root: the ``absa`` directory.
        name: a key of :data:`DATASETS`.
        lowercase: lower-case every token (the HAABSA files and Twitter training set already
            are).
        valid_fraction: if > 0, hold out ``round(valid_fraction · len(train))`` training
            examples drawn with ``random.Random(f"absa/{name}/{seed}")`` as ``"valid"``; both
            parts keep the file order.
        seed: chooses the held-out examples.
    """
    if name not in DATASETS:
        raise ValueError(f"name must be one of {sorted(DATASETS)}, got {name!r}")
    if not 0 <= valid_fraction < 1:
        raise ValueError(f"valid_fraction must be in [0, 1), got {valid_fraction}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    root = Path(root)
    train_file, test_file = DATASETS[name]
    train = read_aspect_file(root / train_file, lowercase)
    test = read_aspect_file(root / test_file, lowercase)
    if valid_fraction == 0:
        return {"train": train, "test": test}
    held_out = set(
        random.Random(f"absa/{name}/{seed}").sample(
            range(len(train)), round(valid_fraction * len(train))
        )
    )
    return {
        "train": [e for i, e in enumerate(train) if i not in held_out],
        "valid": [e for i, e in enumerate(train) if i in held_out],
        "test": test,
    }


def majority_baseline(
    train: Sequence[AspectExample], test: Sequence[AspectExample]
) -> dict[str, str | float]:
    """The trivial classifier: every test example gets the most frequent class of ``train``
    (ties: the lower label).

    Returns:
        ``{"class": polarity, "accuracy": …, "macro_f1": …}`` on ``test``. Macro-F1 is the mean
        of the per-class ``F1 = 2·TP / (2·TP + FP + FN)`` over the classes that occur in ``test``
        or are predicted: the predicted class scores ``2 n_c / (N + n_c)`` (``n_c`` of its
        examples among the ``N``), every other class 0.
    """
    if not train or not test:
        raise ValueError(
            f"the majority baseline needs training and test examples, got {len(train)} and "
            f"{len(test)}"
        )
    trained = Counter(e.label for e in train)
    majority = max(range(len(POLARITIES)), key=lambda c: (trained[c], -c))
    tested = Counter(e.label for e in test)
    classes = set(tested) | {majority}
    f1 = 2 * tested[majority] / (len(test) + tested[majority])
    return {
        "class": POLARITIES[majority],
        "accuracy": tested[majority] / len(test),
        "macro_f1": f1 / len(classes),
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Print each benchmark's examples per class and its majority-class baseline on the test
    set."""
    parser = argparse.ArgumentParser(description=" ".join(main.__doc__.split()))
    parser.add_argument(
        "--data", default="../shared/data", help="the shared data folder (holding absa/)"
    )
    args = parser.parse_args(argv)
    print(f"{'benchmark':22s} {'train (neg/neu/pos)':>22s} {'test (neg/neu/pos)':>20s}  majority")
    for name in DATASETS:
        splits = load_absa(Path(args.data) / "absa", name)
        shown = {}
        for split in ("train", "test"):
            counts = Counter(e.label for e in splits[split])
            per_class = "/".join(str(counts[c]) for c in range(len(POLARITIES)))
            shown[split] = f"{len(splits[split])} ({per_class})"
        base = majority_baseline(splits["train"], splits["test"])
        print(
            f"{name:22s} {shown['train']:>22s} {shown['test']:>20s}  {base['class']}: accuracy "
            f"{100 * float(base['accuracy']):.2f} %, macro-F1 {100 * float(base['macro_f1']):.2f} %"
        )


__all__ = [
    "DATASETS",
    "POLARITIES",
    "AspectExample",
    "load_absa",
    "majority_baseline",
    "read_aspect_file",
    "split_sentence",
]


if __name__ == "__main__":
    main()
