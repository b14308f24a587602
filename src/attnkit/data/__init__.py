"""Parallel corpora for attention-based translation: tokenisation, vocabularies, the bundled
Tatoeba English–French pairs and a hand-aligned gold of 50 of them, the Hansards alignment gold,
reproducible batches, and statistical aligners (IBM Model 1, fast_align) with symmetrization for
supervised-attention targets."""

from attnkit.data.batching import Batch, Batches, EncodedExample, collate, encode
from attnkit.data.corpus import Example
from attnkit.data.fast_align import FastAlign
from attnkit.data.hansards import load_hansards
from attnkit.data.ibm_model1 import IBMModel1
from attnkit.data.symmetrize import symmetrize, transpose_links
from attnkit.data.tatoeba import load_tatoeba
from attnkit.data.tatoeba_gold import load_tatoeba_gold
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
    "FastAlign",
    "IBMModel1",
    "Vocabulary",
    "collate",
    "detokenize",
    "encode",
    "load_hansards",
    "load_tatoeba",
    "load_tatoeba_gold",
    "symmetrize",
    "tokenize",
    "transpose_links",
]
