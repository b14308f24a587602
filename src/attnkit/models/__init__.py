"""Sequence-to-sequence translation models built from attnkit's attention.

- :class:`RNNSeq2Seq`: GRU encoder–decoders of Bahdanau et al. (2015) and Luong et al. (2015);
- :class:`TransformerSeq2Seq`: the Transformer of Vaswani et al. (2017).

Both take integer ids (PAD=0, BOS=2, EOS=3 by default), return :class:`Seq2SeqOutput` from a
teacher-forced ``forward`` and a list of :class:`Translation` from ``translate``.
"""

from attnkit.models.outputs import Seq2SeqOutput, Translation
from attnkit.models.rnn_seq2seq import RNNSeq2Seq
from attnkit.models.transformer_seq2seq import TransformerSeq2Seq

__all__ = ["RNNSeq2Seq", "Seq2SeqOutput", "TransformerSeq2Seq", "Translation"]
