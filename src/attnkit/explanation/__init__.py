"""Is attention explanation? Jain & Wallace (2019) and Wiegreffe & Pinter (2019), reproduced, and
token-importance maps ranked by ERASER's faithfulness.

Three commands, each a resumable experiment::

    python -m attnkit.explanation jain-wallace [--corpora ...] [--encoders lstm cnn average]
    python -m attnkit.explanation wiegreffe-pinter
    python -m attnkit.explanation faithfulness [--models bilstm minilm] [--sentences K]

(each also takes ``--data DIR --runs-dir D --seed S --quick``). The experiments run on
:class:`attnkit.models.additive_attention_classifier.AdditiveAttentionClassifier` models (Jain &
Wallace's embedding → encoder → additive attention → decoder) and, for the faithfulness table,
on all-MiniLM-L6-v2 fine-tuned on SST-2. Every attention change goes through the engine's hook
(:func:`attnkit.evaluate.ablate`); nothing rebinds a forward. Each trained model and each result
is written under ``RUNS/explanation/<experiment>/`` and reused when present, so an interrupted
command resumes. Runs are deterministic given ``--seed`` (CPU, one thread).

One concept per module:

* :mod:`~attnkit.explanation.data`: SST-2 and bAbI 1-3 as token ids, batches;
* :mod:`~attnkit.explanation.attention_modes`: trained, uniform or frozen random attention;
* :mod:`~attnkit.explanation.training`: the settings, training and evaluation of a classifier;
* :mod:`~attnkit.explanation.runs`: the commands' options and their store of models and results;
* :mod:`~attnkit.explanation.jain_wallace`: τ with gradient and leave-one-out importance,
  random permutations and adversarial attention (their Table 2, Figs. 2-5);
* :mod:`~attnkit.explanation.wiegreffe_pinter`: uniform and frozen attention baselines and the
  model-consistent adversary;
* :mod:`~attnkit.explanation.subjects`, :mod:`~attnkit.explanation.flow`,
  :mod:`~attnkit.explanation.minilm`, :mod:`~attnkit.explanation.faithfulness`: the models under
  the faithfulness table, attention flow from ``[CLS]``, the MiniLM fine-tuning and the table;
* :mod:`~attnkit.explanation.cli`: the command line (``__main__`` runs it).
"""

from attnkit.explanation.attention_modes import ATTENTION, attention_session, frozen_random_scores
from attnkit.explanation.cli import main
from attnkit.explanation.data import (
    BABI_STATEMENTS,
    BABI_TASKS,
    Batch,
    Corpus,
    Split,
    batch_of,
    batches,
    load_babi_task,
    load_corpus,
    load_sst2,
    pad,
    sst2_sentences,
)
from attnkit.explanation.faithfulness import (
    faithfulness_table,
    faithfulness_table_rows,
    run_faithfulness,
)
from attnkit.explanation.flow import FLOW_SCALE, cls_flow
from attnkit.explanation.jain_wallace import (
    ENCODERS,
    EPSILON,
    Distribution,
    adversarial_jsd,
    gradient_importance,
    jain_wallace_measures,
    jain_wallace_table,
    kendall,
    leave_one_out,
    permutation_changes,
    run_jain_wallace,
)
from attnkit.explanation.minilm import FineTuning, finetune_minilm, load_minilm
from attnkit.explanation.runs import Options, Store
from attnkit.explanation.subjects import (
    FAITHFULNESS_METHODS,
    NOT_APPLICABLE_BILSTM,
    BiLSTMSubject,
    FaithfulnessBatch,
    FaithfulnessSubject,
    MiniLMSubject,
)
from attnkit.explanation.training import (
    Objective,
    Setting,
    build_model,
    cross_entropy,
    encoder_setting,
    evaluate,
    predict,
    train,
)
from attnkit.explanation.wiegreffe_pinter import (
    adversarial_objective,
    base_targets,
    consistency,
    kl_divergence,
    run_wiegreffe_pinter,
    wiegreffe_pinter_tables,
)

__all__ = [
    "ATTENTION",
    "BABI_STATEMENTS",
    "BABI_TASKS",
    "ENCODERS",
    "EPSILON",
    "FAITHFULNESS_METHODS",
    "FLOW_SCALE",
    "NOT_APPLICABLE_BILSTM",
    "Batch",
    "BiLSTMSubject",
    "Corpus",
    "Distribution",
    "FaithfulnessBatch",
    "FaithfulnessSubject",
    "FineTuning",
    "MiniLMSubject",
    "Objective",
    "Options",
    "Setting",
    "Split",
    "Store",
    "adversarial_jsd",
    "adversarial_objective",
    "attention_session",
    "base_targets",
    "batch_of",
    "batches",
    "build_model",
    "cls_flow",
    "consistency",
    "cross_entropy",
    "encoder_setting",
    "evaluate",
    "faithfulness_table",
    "faithfulness_table_rows",
    "finetune_minilm",
    "frozen_random_scores",
    "gradient_importance",
    "jain_wallace_measures",
    "jain_wallace_table",
    "kendall",
    "kl_divergence",
    "leave_one_out",
    "load_babi_task",
    "load_corpus",
    "load_minilm",
    "load_sst2",
    "main",
    "pad",
    "permutation_changes",
    "predict",
    "run_faithfulness",
    "run_jain_wallace",
    "run_wiegreffe_pinter",
    "sst2_sentences",
    "train",
    "wiegreffe_pinter_tables",
]
