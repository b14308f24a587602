"""BLEU (Papineni et al. 2002) in the two forms a translation comparison needs.

- :func:`detokenized_bleu`: sacrebleu on detokenised text against the raw references (its own
  13a tokenisation), with sacrebleu's *signature* naming every setting (Post 2018), the number
  one can compare across papers.
- :func:`token_bleu`: corpus BLEU-4 on the model's own tokens, optionally lower-cased, with no
  tokenisation of its own: what ``torchtext.data.metrics.bleu_score`` and Hugging Face
  ``evaluate``'s ``bleu`` with a token list compute, so the figures of the pytorch-seq2seq
  tutorials (lower-cased spaCy tokens) are compared like with like.

Example::

    >>> score, signature = detokenized_bleu(["A dog runs."], ["A dog runs."])
    >>> round(score, 6), signature.split("|")[2]
    (100.0, 'case:mixed')
    >>> round(token_bleu([["a", "dog", "runs", "."]], [["A", "dog", "runs", "."]]), 6)
    100.0
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["detokenized_bleu", "token_bleu"]


def _check(hypotheses: Sequence[object], references: Sequence[object]) -> None:
    if isinstance(hypotheses, str) or isinstance(references, str):
        raise TypeError("hypotheses and references must be sequences of sentences, got a str")
    if len(hypotheses) != len(references):
        raise ValueError(
            f"expected one reference per hypothesis, got {len(hypotheses)} hypotheses and "
            f"{len(references)} references"
        )


def detokenized_bleu(
    hypotheses: Sequence[str], references: Sequence[str], *, lowercase: bool = False
) -> tuple[float, str]:
    """sacrebleu's corpus BLEU (0-100) of detokenised hypotheses against one raw reference each.

    Args:
        hypotheses: one detokenised sentence per test sentence.
        references: the raw reference sentences, in the same order.
        lowercase: compare case-insensitively (``case:lc`` in the signature).

    Returns:
        ``(score, signature)``, e.g. ``"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"``.
    """
    from sacrebleu.metrics import BLEU

    _check(hypotheses, references)
    metric = BLEU(lowercase=lowercase)
    score = metric.corpus_score([str(h) for h in hypotheses], [[str(r) for r in references]])
    return float(score.score), str(metric.get_signature())


def token_bleu(
    hypotheses: Sequence[Sequence[str]],
    references: Sequence[Sequence[str]],
    *,
    lowercase: bool = True,
) -> float:
    """Corpus BLEU-4 (0-100) of token lists against one reference token list each.

    ``BP · exp(¼ Σ_n log p_n)`` with the modified n-gram precisions ``p_n`` summed over the
    corpus and the brevity penalty ``BP = min(1, exp(1 - r/c))`` (Papineni et al. 2002, §2.3);
    tokens are compared as given (lower-cased first when ``lowercase``), never re-tokenised.

    Shapes: ``hypotheses[i]`` and ``references[i]`` are the tokens of sentence ``i``.
    """
    from sacrebleu.metrics import BLEU

    _check(hypotheses, references)
    for name, sentences in (("hypotheses", hypotheses), ("references", references)):
        for number, tokens in enumerate(sentences):
            if isinstance(tokens, str):
                raise TypeError(f"{name}[{number}]: expected a list of tokens, got a str")

    def joined(tokens: Sequence[str]) -> str:
        return " ".join(t.lower() if lowercase else t for t in tokens)

    # tokenize="none": sacrebleu splits on the spaces joined here, so the tokens stay as given
    metric = BLEU(tokenize="none", force=True)
    score = metric.corpus_score([joined(h) for h in hypotheses], [[joined(r) for r in references]])
    return float(score.score)
