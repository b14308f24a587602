"""Task models of the literature built from attnkit's attention.

- :class:`RNNSeq2Seq`: GRU encoder–decoders of Bahdanau et al. (2015) and Luong et al. (2015);
- :class:`TransformerSeq2Seq`: the Transformer of Vaswani et al. (2017);
- sentence classifiers: :class:`SelfAttentiveClassifier` (Lin et al. 2017) and
  :class:`PretrainedSentenceClassifier` (the capsule and multi-dimensional heads of
  :mod:`attnkit.models.sentence_classifier`), each initialisable from pretrained word vectors,
  and their reference without attention, :class:`KimCNN` (Kim 2014).

The translation models take integer ids (PAD=0, BOS=2, EOS=3 by default), return
:class:`Seq2SeqOutput` from a teacher-forced ``forward`` and a list of :class:`Translation` from
``translate``.
"""

from attnkit.models.kim_cnn import KimCNN
from attnkit.models.outputs import Seq2SeqOutput, Translation
from attnkit.models.pretrained_sentence_classifier import PretrainedSentenceClassifier
from attnkit.models.rnn_seq2seq import RNNSeq2Seq
from attnkit.models.self_attentive_classifier import SelfAttentiveClassifier
from attnkit.models.transformer_seq2seq import TransformerSeq2Seq

__all__ = [
    "KimCNN",
    "PretrainedSentenceClassifier",
    "RNNSeq2Seq",
    "SelfAttentiveClassifier",
    "Seq2SeqOutput",
    "TransformerSeq2Seq",
    "Translation",
]
