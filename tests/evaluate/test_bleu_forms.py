"""attnkit.evaluate.bleu_forms: corpus BLEU on tokens against Papineni et al.'s formula written here in
float64, and sacrebleu's detokenised BLEU with its signature."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from attnkit.evaluate.bleu_forms import detokenized_bleu, token_bleu


def papineni(hypotheses, references) -> float:
    """Corpus BLEU-4, eq. of Papineni et al. (2002) §2.3: clipped n-gram counts summed over the
    corpus, geometric mean of p_1..p_4, brevity penalty exp(1 - r/c) when c <= r."""
    log_p = 0.0
    for n in range(1, 5):
        matched = total = 0
        for h, r in zip(hypotheses, references, strict=True):
            h_grams = Counter(tuple(h[i : i + n]) for i in range(len(h) - n + 1))
            r_grams = Counter(tuple(r[i : i + n]) for i in range(len(r) - n + 1))
            matched += sum(min(c, r_grams[g]) for g, c in h_grams.items())
            total += sum(h_grams.values())
        log_p += math.log(matched / total) / 4
    c = sum(len(h) for h in hypotheses)
    r = sum(len(x) for x in references)
    bp = 1.0 if c > r else math.exp(1 - r / c)
    return 100 * bp * math.exp(log_p)


def corpus(seed: int):
    rng = random.Random(seed)
    words = ["a", "dog", "man", "runs", "in", "the", "park", ".", "Two", "two", "red"]
    references = [[rng.choice(words) for _ in range(rng.randint(6, 12))] for _ in range(40)]
    hypotheses = []
    for r in references:
        h = [w if rng.random() < 0.7 else rng.choice(words) for w in r]
        hypotheses.append(h[: max(4, len(h) - rng.randint(0, 3))])
    return hypotheses, references


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_token_bleu_is_papinenis_corpus_bleu(seed: int) -> None:
    hypotheses, references = corpus(seed)
    lowered = [[w.lower() for w in s] for s in references]
    expected = papineni([[w.lower() for w in h] for h in hypotheses], lowered)
    assert token_bleu(hypotheses, references) == pytest.approx(expected, abs=1e-9)
    # case-sensitive: "Two" and "two" differ
    assert token_bleu(hypotheses, references, lowercase=False) == pytest.approx(
        papineni(hypotheses, references), abs=1e-9
    )


def test_token_bleu_does_not_retokenise() -> None:
    # one token "runs." is not the two tokens "runs" "." (13a tokenisation would split it)
    assert token_bleu([["a", "dog", "runs."]], [["a", "dog", "runs", "."]]) < 100.0


def test_detokenized_bleu_tokenises_and_signs() -> None:
    score, signature = detokenized_bleu(["A dog runs in the park."], ["A dog runs in the park."])
    assert score == pytest.approx(100.0)
    assert signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    _, lowered = detokenized_bleu(["a dog ."], ["A dog ."], lowercase=True)
    assert "case:lc" in lowered


def test_bad_input_is_one_line() -> None:
    with pytest.raises(ValueError, match="one reference per hypothesis, got 1 hypotheses and 2"):
        token_bleu([["a"]], [["a"], ["b"]])
    with pytest.raises(TypeError, match=r"hypotheses\[0\]: expected a list of tokens, got a str"):
        token_bleu(["a dog"], [["a", "dog"]])
