"""Evaluating attention (survey §4): intrinsic measures (alignment error rate, alignments read
from decoder attention — Shift-Att, layer/head choice, symmetrization of both directions —,
attention correctness, rank correlation with human attention, supervised attention), extrinsic
measures (BLEU, perplexity, accuracy, macro-F1), ablation (replace the attention, measure the
drop) and the faithfulness of any token-importance map (ERASER's comprehensiveness, sufficiency
and AOPC)."""

from attnkit.data.symmetrize import (
    SYMMETRIZATIONS,
    grow_diag,
    grow_diag_final,
    grow_diag_final_and,
    intersection,
    symmetrize,
    transpose_links,
    union,
)
from attnkit.evaluate.ablation import Ablation, ablate
from attnkit.evaluate.adversarial import AdversarialAttention, adversarial_attention
from attnkit.evaluate.alignment import (
    alignment_error_rate,
    corpus_alignment_error_rate,
    links_from_weights,
    parse_pharaoh,
)
from attnkit.evaluate.attention_alignment import (
    AttentionChoice,
    average_attention,
    choose_attention,
    decoder_step_rows,
    symmetrized_attention_links,
)
from attnkit.evaluate.correctness import attention_correctness
from attnkit.evaluate.correlation import rank_correlation
from attnkit.evaluate.faithfulness import (
    AOPC,
    ERASER_FRACTIONS,
    aopc,
    comprehensiveness,
    sufficiency,
)
from attnkit.evaluate.metrics import accuracy, bleu, macro_f1, perplexity
from attnkit.evaluate.supervised import supervised_attention_loss

__all__ = [
    "AOPC",
    "ERASER_FRACTIONS",
    "SYMMETRIZATIONS",
    "Ablation",
    "AdversarialAttention",
    "AttentionChoice",
    "ablate",
    "accuracy",
    "adversarial_attention",
    "alignment_error_rate",
    "aopc",
    "attention_correctness",
    "average_attention",
    "bleu",
    "choose_attention",
    "comprehensiveness",
    "corpus_alignment_error_rate",
    "decoder_step_rows",
    "grow_diag",
    "grow_diag_final",
    "grow_diag_final_and",
    "intersection",
    "links_from_weights",
    "macro_f1",
    "parse_pharaoh",
    "perplexity",
    "rank_correlation",
    "sufficiency",
    "supervised_attention_loss",
    "symmetrize",
    "symmetrized_attention_links",
    "transpose_links",
    "union",
]
