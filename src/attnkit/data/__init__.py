"""Parallel corpora for attention-based translation: tokenisation, vocabularies, the bundled
Tatoeba English–French pairs, the Hansards alignment gold, reproducible batches, and an
IBM Model 1 aligner for supervised-attention targets."""

from attnkit.data.batching import Batch, Batches, EncodedExample, collate, encode
from attnkit.data.corpus import Example
from attnkit.data.hansards import load_hansards
from attnkit.data.ibm_model1 import IBMModel1
from attnkit.data.tatoeba import load_tatoeba
from attnkit.data.tokenize import detokenize, tokenize
from attnkit.data.vocabulary import BOS, EOS, PAD, UNK, Vocabulary

__all__ = [
    "BOS",
    "EOS",
    "PAD",
    "UNK",
    "Batch",
    "Batches",
    "EncodedExample",
    "Example",
    "IBMModel1",
    "Vocabulary",
    "collate",
    "detokenize",
    "encode",
    "load_hansards",
    "load_tatoeba",
    "tokenize",
]
