"""Evaluating attention (survey §4): intrinsic measures (alignment error rate, attention
correctness, rank correlation with human attention, supervised attention), extrinsic measures
(BLEU, perplexity, accuracy, macro-F1) and ablation (replace the attention, measure the drop)."""

from attnkit.evaluate.ablation import Ablation, ablate
from attnkit.evaluate.adversarial import AdversarialAttention, adversarial_attention
from attnkit.evaluate.alignment import (
    alignment_error_rate,
    corpus_alignment_error_rate,
    links_from_weights,
    parse_pharaoh,
)
from attnkit.evaluate.correctness import attention_correctness
from attnkit.evaluate.correlation import rank_correlation
from attnkit.evaluate.metrics import accuracy, bleu, macro_f1, perplexity
from attnkit.evaluate.supervised import supervised_attention_loss

__all__ = [
    "Ablation",
    "AdversarialAttention",
    "ablate",
    "accuracy",
    "adversarial_attention",
    "alignment_error_rate",
    "attention_correctness",
    "bleu",
    "corpus_alignment_error_rate",
    "links_from_weights",
    "macro_f1",
    "parse_pharaoh",
    "perplexity",
    "rank_correlation",
    "supervised_attention_loss",
]
