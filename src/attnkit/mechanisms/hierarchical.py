"""Hierarchical attention (survey §3.1.2, Fig. 8; Yang et al.'s HAN): words → sentences → document.

    words of sentence s ─► [word encoder] ─► Attention Module_S (query u_w) ─► c^(s)  (s = 1..n_S)
    C = [c^(1), …, c^(n_S)] ─► [sentence encoder] ─► Attention Module_D (query u_s) ─► c^(D)

The survey's Attention Module_S summarises each sentence from its word feature matrix ``F^(s)``
with no outside query ("a self-attentive mechanism"); Attention Module_D summarises the matrix of
sentence vectors ``C`` into the document vector ``c^(D)``. As in HAN, each self-attentive query is a
learned vector (``u_w``, ``u_s``) and keys = values = the features of the level; HAN's GRUs are
the optional encoders between levels (the survey's feature model), identity by default.

Rows are vectors: ``F^(s)`` is ``words[b, s] [n_words, d]`` and ``C`` is ``[B, n_S, d]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnkit.core.align import Align, build_align
from attnkit.core.call import AttentionOutput
from attnkit.core.engine import attention
from attnkit.core.scores import Score, build_score

ScoreSpec = str | Score
AlignSpec = str | Align


class IdentityEncoder(nn.Module):
    """The default encoder between levels: the features unchanged (the survey's Fig. 8).

    Every encoder of :class:`HierarchicalAttention` is called as ``encoder(features, mask)`` with
    ``features [B, L, d_in]`` and bool ``mask [B, L]`` (True = a real element) and returns
    ``[B, L, d_out]``.

    Example::

        >>> features = torch.randn(2, 3, 8)
        >>> IdentityEncoder()(features, torch.ones(2, 3, dtype=torch.bool)) is features
        True
    """

    def forward(self, features: Tensor, mask: Tensor) -> Tensor:
        """The features unchanged.

        Args:
            features: ``[B, L, d]``.
            mask: bool ``[B, L]``, True at real elements (unused).

        Returns:
            ``features`` itself.
        """
        return features


class RecurrentEncoder(nn.Module):
    """Runs a batch-first ``nn.RNN``/``nn.GRU``/``nn.LSTM`` over the real elements of each sequence.

    The real elements of each sequence (in their order, wherever the padding sits) are packed, so
    padding never enters the recurrence (HAN's bidirectional GRU would otherwise read the padding
    before the words in its backward pass). Outputs at padded positions, and whole sequences with
    no real element, are exactly zero.

    Args:
        rnn: a recurrent module built with ``batch_first=True``.

    Shapes: ``features [B, L, d_in]``, bool ``mask [B, L]`` (True = a real element) →
    ``[B, L, d_out]`` (``d_out`` = hidden size × directions).

    Example::

        >>> import torch
        >>> from torch import nn
        >>> encoder = RecurrentEncoder(nn.GRU(8, 5, batch_first=True, bidirectional=True))
        >>> mask = torch.tensor([[True, True, False], [False, False, False]])
        >>> encoder(torch.randn(2, 3, 8), mask).shape
        torch.Size([2, 3, 10])
    """

    def __init__(self, rnn: nn.RNNBase) -> None:
        super().__init__()
        if not isinstance(rnn, nn.RNNBase) or not rnn.batch_first:
            raise ValueError(
                "RecurrentEncoder needs an nn.RNN/nn.GRU/nn.LSTM with batch_first=True, got "
                f"{rnn!r}"
            )
        self.rnn = rnn

    def forward(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        """The recurrence over the real elements of each sequence.

        Args:
            features: ``[B, L, d_in]``.
            mask: bool ``[B, L]``, True at real elements (``None``: all, run as one batch).

        Returns:
            ``[B, L, d_out]``, zero at padded positions.
        """
        if mask is None:
            return self.rnn(features)[0]
        n, length = mask.shape
        if n == 0 or length == 0:
            return self.rnn(features)[0]
        # Real elements first, in their order (a stable sort), so packing drops exactly the padding
        # wherever it sits; the outputs are put back in place afterwards.
        order = torch.sort((~mask).to(torch.int8), dim=-1, stable=True).indices  # [B, L]
        gathered = features.gather(1, order.unsqueeze(-1).expand(-1, -1, features.shape[-1]))
        lengths = mask.sum(-1)
        # pack_padded_sequence refuses length 0: run such sequences over one element, then zero them.
        packed = pack_padded_sequence(
            gathered, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False
        )
        out = pad_packed_sequence(self.rnn(packed)[0], batch_first=True, total_length=length)[0]
        out = torch.zeros_like(out).scatter(1, order.unsqueeze(-1).expand_as(out), out)
        return torch.where(mask.unsqueeze(-1), out, torch.zeros((), dtype=out.dtype))


@dataclass(frozen=True, kw_only=True)
class HierarchicalAttentionOutput(AttentionOutput):
    """What :class:`HierarchicalAttention` returns.

    An :class:`~attnkit.AttentionOutput` (``context``, ``weights``, ``log_prob`` as there)
    with this mechanism's extra fields (keyword-only). ``weights`` is None: the two levels'
    weights are ``word_weights`` and ``sentence_weights``.

    Attributes:
        context: the document vector ``c^(D)`` ``[B, d_sentence]``.
        sentence_vectors: ``C``, the sentence vectors ``c^(s)`` ``[B, n_S, d_word]`` (zero for a
            sentence with no real word), before the sentence encoder.
        word_weights: weights of Attention Module_S ``[B, n_S, n_words]`` (zero on padded words
            and in padded sentences), when ``return_weights=True``.
        sentence_weights: weights of Attention Module_D ``[B, n_S]`` (zero on padded sentences),
            when ``return_weights=True``.

    Example::

        >>> han = ak.mechanisms.HierarchicalAttention(d_word=16)
        >>> out = han(torch.randn(2, 3, 5, 16), torch.ones(2, 3, 5, dtype=torch.bool))
        >>> out.context.shape, out.sentence_vectors.shape
        (torch.Size([2, 16]), torch.Size([2, 3, 16]))
    """

    sentence_vectors: Tensor
    word_weights: Tensor | None = None
    sentence_weights: Tensor | None = None


def per_level(spec: object, what: str) -> tuple:
    """One spec per level, ``(lower/word, upper/sentence)`` or ``(high, low)`` as the caller
    documents, from one spec for both levels or a pair of specs."""
    if isinstance(spec, tuple):
        if len(spec) != 2:
            raise ValueError(f"{what} must be one spec or a pair (one per level), got {spec!r}")
        return spec
    return spec, spec


def _learned_query(size: int) -> nn.Parameter:
    # Unit-variance scores at initialisation for dot-product scores over unit-variance keys.
    return nn.Parameter(torch.randn(size) / math.sqrt(size))


class HierarchicalAttention(nn.Module):
    """Hierarchical attention (Fig. 8): words → sentence vectors → document vector.

    For each sentence ``s``, Attention Module_S attends its (encoded) word vectors with the learned
    query ``u_w``: ``a^(s) = align(score(u_w, H^(s)))``, ``c^(s) = Σ_i a_i^(s) h_i^(s)``. Attention
    Module_D attends the (encoded) sentence vectors ``G = encoder(C)`` with the learned query
    ``u_s``: ``c^(D) = Σ_s a_s g_s``. With the additive score, ``score(u, h) = w^T tanh(W_1 u +
    W_2 h + b)`` is HAN's ``u_w^T tanh(W_w h + b_w)`` (``W_1 u`` is a learned constant, and ``w``
    plays ``u_w``). The survey numbers no equation here; each module is eq. (2)-(4).

    Args:
        d_word: size of the word vectors that Attention Module_S attends (after ``word_encoder``),
            also the size of ``u_w`` and of the sentence vectors.
        d_sentence: size of the sentence vectors that Attention Module_D attends (after
            ``sentence_encoder``), also the size of ``u_s`` and of ``c^(D)``; default ``d_word``.
        score: a score name or object for both levels, or a pair ``(word, sentence)``. Parametric
            names are built with the level's sizes (query = key = ``d_word`` / ``d_sentence``).
        align: an alignment name or object, or a pair ``(word, sentence)``.
        d_hidden: ``d_w`` of the additive score (default: the level's size).
        word_encoder: ``encoder(words [B, n_words, d_in], mask [B, n_words]) -> [N, n_words,
            d_word]``, run on each sentence (HAN: a bidirectional GRU, see
            :class:`RecurrentEncoder`); default :class:`IdentityEncoder`.
        sentence_encoder: ``encoder(C [B, n_S, d_word], mask [B, n_S]) -> [B, n_S, d_sentence]``;
            default :class:`IdentityEncoder`.
        dropout: dropout on the attention weights of both levels, in training mode only.

    Padding: a padded word, any word of a padded sentence, and a padded sentence get exactly zero
    weight; a sentence with no real word is padding at the sentence level (its vector is zero);
    a document with no real sentence gets a zero ``c^(D)``. Inputs at padded positions must be
    finite (as in :func:`attnkit.attention`).

    Example::

        >>> import torch, attnkit as ak
        >>> from attnkit.mechanisms.hierarchical import HierarchicalAttention
        >>> han = HierarchicalAttention(d_word=16)
        >>> words = torch.randn(2, 3, 5, 16)                    # [B, n_S, n_words, d]
        >>> word_mask = torch.ones(2, 3, 5, dtype=torch.bool)
        >>> word_mask[1, 2] = False                             # document 1 has two sentences
        >>> out = han(words, word_mask, return_weights=True)
        >>> out.context.shape, out.word_weights.shape, out.sentence_weights[1, 2].item()
        (torch.Size([2, 16]), torch.Size([2, 3, 5]), 0.0)
    """

    taxonomy = {"feature_levels": "Hierarchical", "query_type": "Self-Attentive"}

    def __init__(
        self,
        d_word: int,
        d_sentence: int | None = None,
        *,
        score: ScoreSpec | tuple[ScoreSpec, ScoreSpec] = "additive",
        align: AlignSpec | tuple[AlignSpec, AlignSpec] = "softmax",
        d_hidden: int | None = None,
        word_encoder: nn.Module | None = None,
        sentence_encoder: nn.Module | None = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.d_word, self.d_sentence = d_word, d_sentence or d_word
        word_score, sentence_score = per_level(score, "score")
        word_align, sentence_align = per_level(align, "align")
        self.word_encoder = IdentityEncoder() if word_encoder is None else word_encoder
        self.word_query = _learned_query(self.d_word)  # u_w
        self.word_score = build_score(word_score, self.d_word, self.d_word, d_hidden)
        self.word_align = build_align(word_align, self.d_word, self.d_word)
        self.sentence_encoder = IdentityEncoder() if sentence_encoder is None else sentence_encoder
        self.sentence_query = _learned_query(self.d_sentence)  # u_s
        d = self.d_sentence
        self.sentence_score = build_score(sentence_score, d, d, d_hidden)
        self.sentence_align = build_align(sentence_align, d, d)
        self.dropout = dropout

    def forward(
        self,
        words: Tensor,
        word_mask: Tensor | None = None,
        sentence_mask: Tensor | None = None,
        *,
        return_weights: bool = False,
    ) -> HierarchicalAttentionOutput:
        """Summarise each document of ``words``.

        Args:
            words: word feature vectors ``[B, n_S, n_words, d_in]`` (``d_in = d_word`` without a
                word encoder).
            word_mask: bool ``[B, n_S, n_words]``, True = a real word; default: all real.
            sentence_mask: bool ``[B, n_S]``, True = a real sentence; default: the sentences
                with a real word. Combined with ``word_mask`` by logical and.
            return_weights: include the weights of both levels.

        Returns:
            :class:`HierarchicalAttentionOutput`.
        """
        if not isinstance(words, Tensor) or words.dim() != 4:
            given = tuple(words.shape) if isinstance(words, Tensor) else type(words).__name__
            raise ValueError(f"words must be [B, n_sentences, n_words, d], got {given}")
        b, n_s, n_w, d_in = words.shape
        word_mask, sentence_mask = self._masks(words, word_mask, sentence_mask)
        dropout = self.dropout if self.training else 0.0

        flat_mask = word_mask.reshape(b * n_s, n_w)
        hidden = self.word_encoder(words.reshape(b * n_s, n_w, d_in), flat_mask)
        _check_encoded("word_encoder", hidden, (b * n_s, n_w, self.d_word))
        word_out = attention(
            self.word_query.to(hidden.dtype).expand(b * n_s, 1, self.d_word),
            hidden,
            hidden,
            score=self.word_score,
            align=self.word_align,
            mask=flat_mask.unsqueeze(1),  # [B·n_S, 1, n_words]
            dropout=dropout,
            return_weights=return_weights,
        )
        sentences = word_out.context.reshape(b, n_s, self.d_word)  # C, one row per sentence

        encoded = self.sentence_encoder(sentences, sentence_mask)
        _check_encoded("sentence_encoder", encoded, (b, n_s, self.d_sentence))
        sentence_out = attention(
            self.sentence_query.to(encoded.dtype).expand(b, 1, self.d_sentence),
            encoded,
            encoded,
            score=self.sentence_score,
            align=self.sentence_align,
            mask=sentence_mask.unsqueeze(1),  # [B, 1, n_S]
            dropout=dropout,
            return_weights=return_weights,
        )
        word_weights = sentence_weights = None
        if word_out.weights is not None and sentence_out.weights is not None:
            w = word_out.weights  # [B·n_S, 1, n_words(, d_v)]
            word_weights = w.reshape(b, n_s, n_w, *w.shape[3:])
            sentence_weights = sentence_out.weights[:, 0]
        return HierarchicalAttentionOutput(
            context=sentence_out.context[:, 0],
            sentence_vectors=sentences,
            word_weights=word_weights,
            sentence_weights=sentence_weights,
        )

    @staticmethod
    def _masks(
        words: Tensor, word_mask: Tensor | None, sentence_mask: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """``(word_mask [B, n_S, n_words], sentence_mask [B, n_S])``, each implying the other."""
        b, n_s, n_w, _ = words.shape
        word_mask = _check_mask("word_mask", word_mask, (b, n_s, n_w), words.device)
        sentence_mask = _check_mask("sentence_mask", sentence_mask, (b, n_s), words.device)
        if word_mask is None:
            word_mask = torch.ones(b, n_s, n_w, dtype=torch.bool, device=words.device)
        if sentence_mask is not None:
            word_mask = word_mask & sentence_mask.unsqueeze(-1)
        # A sentence with no real word is padding at the sentence level too.
        return word_mask, word_mask.any(-1)

    def extra_repr(self) -> str:
        return f"d_word={self.d_word}, d_sentence={self.d_sentence}"


def _check_mask(
    name: str, mask: Tensor | None, shape: tuple[int, ...], device: torch.device
) -> Tensor | None:
    if mask is None:
        return None
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        given = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise TypeError(f"{name} must be a bool tensor (True = real), got {given}")
    if tuple(mask.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(mask.shape)}")
    if mask.device != device:
        raise ValueError(f"{name} must be on the device of the words ({device}), got {mask.device}")
    return mask


def _check_encoded(name: str, t: Tensor, shape: tuple[int, ...]) -> None:
    if not isinstance(t, Tensor) or tuple(t.shape) != shape:
        given = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
        raise ValueError(f"{name} must return {shape}, got {given}")
