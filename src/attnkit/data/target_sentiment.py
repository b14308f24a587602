"""Target-dependent sentiment, **derived** from human-rated review sentences (no target-level data).

LCR-Rot-hop (Wallaart & Frasincar 2019) classifies the sentiment expressed towards a *target*
phrase given its left and right context; its benchmarks (SemEval-2015/2016 restaurant reviews)
are not shipped by any package this project can install, so this module builds a task whose
label provably depends on *where the target is*, from real human ratings, and says exactly how.

Source: the bundled Rotten Tomatoes review sentences (Pang & Lee's sentence polarity data) with
the mean rating of at least 20 human raters on [-4, 4] (Hutto & Gilbert 2014), as loaded by
:func:`attnkit.data.rated_sentences.load_rated_sentences` (MIT licence via vaderSentiment 3.3.2;
provenance in ``RATED_SENTENCES_LICENSE.md``). Its split (a hash of the sentence text) is kept, so
no sentence occurs in two splits.

Derivation, separately in each split, for a ``seed``:

1. Keep the sentences with ``|rating| >= min_strength`` (default 0.5: clearly signed means) and
   at most ``max_length`` tokens (whole sentences, never truncated). ``positive`` = rating > 0,
   ``negative`` = rating < 0.
2. Shuffle the positive and the negative sentences (``random.Random(f"{seed}:{split}:…")``) and
   pair the k-th positive with the k-th negative (``min(#pos, #neg)`` pairs; ``max_examples``
   keeps the first ``max_examples // 2`` training pairs).
3. For each pair a seeded coin decides which sentence comes first; the **context** is the two
   token sequences joined, first then second (the first sentence's own final punctuation is the
   only boundary, as in running text).
4. The pair gives **two examples** over the same context: one whose target is a span of the
   positive sentence, labelled ``positive``, and one whose target is a span of the negative
   sentence, labelled ``negative``. A span: a start drawn uniformly among the sentence's word
   tokens (those with a letter or digit), a length drawn from 1–3, cut at the sentence's end.
   ``left`` = every context token before the span, ``right`` = every token after it.

So each label is the sign of the human rating **of the sentence that contains the target** — a
proxy for the sentiment towards the target (a rater rated the sentence, not the phrase). The two
examples of a pair share their words and differ only in the target's position, so a model that
ignores the position is at chance (50 %), and the classes are exactly balanced (listed positive,
negative, … so a prefix of even length is balanced too). No label is invented.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from attnkit.data.rated_sentences import LABELS, SPLITS, RatedSentence, load_rated_sentences

MAX_SPAN = 3  # longest target span (tokens)


@dataclass(frozen=True)
class TargetExample:
    """A target phrase in a two-sentence context, labelled by its own sentence's rating.

    Attributes:
        left, target, right: token tuples; ``left + target + right`` is the context.
        label: 0 negative, 1 positive: the sign of ``rating``.
        rating: the mean human rating of the sentence containing the target.
        sentence_id: that sentence's id in the source file.
        other_id: the id of the other sentence of the context (rated with the opposite sign).
        target_in_first: whether the target's sentence comes first in the context.
    """

    left: tuple[str, ...]
    target: tuple[str, ...]
    right: tuple[str, ...]
    label: int
    rating: float
    sentence_id: int
    other_id: int
    target_in_first: bool

    @property
    def polarity(self) -> str:
        return LABELS[self.label]


def _is_word(token: str) -> bool:
    return any(ch.isalnum() for ch in token)


def draw_span(tokens: tuple[str, ...], rng: random.Random) -> tuple[int, int]:
    """``(start, end)`` of a target span in ``tokens``: a start drawn among the word tokens (all
    tokens if there is none), a length from 1 to :data:`MAX_SPAN`, cut at the end."""
    if not tokens:
        raise ValueError("a target span needs a sentence with at least one token, got none")
    starts = [i for i, token in enumerate(tokens) if _is_word(token)] or list(range(len(tokens)))
    start = rng.choice(starts)
    length = rng.randint(1, MAX_SPAN)
    return start, min(start + length, len(tokens))


def make_pair_examples(
    positive: RatedSentence, negative: RatedSentence, rng: random.Random
) -> tuple[TargetExample, TargetExample]:
    """The two examples of one (positive, negative) sentence pair (steps 3–4 of the module
    docstring): ``(target in the positive sentence, target in the negative sentence)``."""
    if not (positive.rating > 0 > negative.rating):
        raise ValueError(
            "expected a positively and a negatively rated sentence, got ratings "
            f"{positive.rating} and {negative.rating}"
        )
    positive_first = rng.random() < 0.5
    first, second = (positive, negative) if positive_first else (negative, positive)
    context = first.tokens + second.tokens
    examples = []
    for own, other in ((positive, negative), (negative, positive)):
        offset = 0 if own is first else len(first.tokens)
        start, end = draw_span(own.tokens, rng)
        start, end = start + offset, end + offset
        examples.append(
            TargetExample(
                left=context[:start],
                target=context[start:end],
                right=context[end:],
                label=int(own.rating > 0),
                rating=own.rating,
                sentence_id=own.id,
                other_id=other.id,
                target_in_first=own is first,
            )
        )
    return examples[0], examples[1]


def load_target_sentiment(
    max_length: int | None = None,
    max_examples: int | None = None,
    seed: int = 0,
    min_strength: float = 0.5,
) -> dict[str, list[TargetExample]]:
    """The derived target-sentiment examples of each split (see the module docstring).

    Args:
        max_length: keep source sentences of at most this many tokens (a context has at most
            twice as many).
        max_examples: at most this many training examples (``max_examples // 2`` pairs, at
            least one); valid and test are whole.
        seed: seeds the pairing, the order in the context and the spans.
        min_strength: keep sentences whose mean rating has at least this magnitude (> 0).

    Returns:
        ``{"train", "valid", "test"}`` → :class:`TargetExample` lists, alternating positive,
        negative.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    for name, value in (("max_length", max_length), ("max_examples", max_examples)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"{name} must be None or an int, got {type(value).__name__}")
        if value is not None and value < 1:
            raise ValueError(f"{name} must be None or >= 1, got {value}")
    if not min_strength > 0:
        raise ValueError(f"min_strength must be > 0 (a sign is needed), got {min_strength}")
    result: dict[str, list[TargetExample]] = {}
    for split, sentences in load_rated_sentences().items():
        kept = [
            s
            for s in sentences
            if abs(s.rating) >= min_strength and (max_length is None or len(s.tokens) <= max_length)
        ]
        positives = [s for s in kept if s.rating > 0]
        negatives = [s for s in kept if s.rating < 0]
        random.Random(f"{seed}:{split}:positive").shuffle(positives)
        random.Random(f"{seed}:{split}:negative").shuffle(negatives)
        pairs = list(zip(positives, negatives, strict=False))  # min(#pos, #neg) pairs
        if split == "train" and max_examples is not None:
            pairs = pairs[: max(1, max_examples // 2)]
        rng = random.Random(f"{seed}:{split}:spans")
        result[split] = [ex for p, n in pairs for ex in make_pair_examples(p, n, rng)]
    return result


__all__ = [
    "LABELS",
    "MAX_SPAN",
    "SPLITS",
    "TargetExample",
    "draw_span",
    "load_target_sentiment",
    "make_pair_examples",
]
