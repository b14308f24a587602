"""Corpora for attention models: tokenisation, vocabularies, the bundled Tatoeba English–French
pairs and a hand-aligned gold of 50 of them, the Hansards alignment gold, reproducible batches,
statistical aligners (IBM Model 1, fast_align) with symmetrization for supervised-attention
targets, and the loaders of the papers' benchmarks read from a data directory (Planetoid
Cora/Citeseer, bAbI, SST, TREC and MR, Multi30k, the aspect-sentiment sets) with GloVe vectors."""

from attnkit.data.absa import AspectExample, load_absa
from attnkit.data.babi import BabiExample, load_babi
from attnkit.data.batching import Batch, Batches, EncodedExample, collate, encode
from attnkit.data.corpus import Example
from attnkit.data.fast_align import FastAlign
from attnkit.data.glove import Coverage, embedding_matrix, load_glove
from attnkit.data.hansards import load_hansards
from attnkit.data.ibm_model1 import IBMModel1
from attnkit.data.multi30k import load_multi30k
from attnkit.data.planetoid import PlanetoidGraph, load_planetoid
from attnkit.data.sentence_classification import (
    SentenceExample,
    cross_validation_folds,
    cross_validation_split,
    load_movie_review_polarity,
    load_trec,
)
from attnkit.data.sst import load_sst
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
    "AspectExample",
    "BabiExample",
    "Batch",
    "Batches",
    "Coverage",
    "EncodedExample",
    "Example",
    "FastAlign",
    "IBMModel1",
    "PlanetoidGraph",
    "SentenceExample",
    "Vocabulary",
    "collate",
    "cross_validation_folds",
    "cross_validation_split",
    "detokenize",
    "embedding_matrix",
    "encode",
    "load_absa",
    "load_babi",
    "load_glove",
    "load_hansards",
    "load_movie_review_polarity",
    "load_multi30k",
    "load_planetoid",
    "load_sst",
    "load_tatoeba",
    "load_tatoeba_gold",
    "load_trec",
    "symmetrize",
    "tokenize",
    "transpose_links",
]
