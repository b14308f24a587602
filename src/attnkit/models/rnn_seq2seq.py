"""Recurrent encoder–decoder translation models with attention: Bahdanau et al. (2015) and
Luong et al. (2015) (survey §2, Fig. 2; eq. 2-4, 23-29).

Example::

    >>> import torch
    >>> from attnkit.models import RNNSeq2Seq
    >>> model = RNNSeq2Seq(20, 30, style="bahdanau", embed_dim=16, hidden_dim=16)
    >>> source, lengths = torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0]]), torch.tensor([3, 2])
    >>> target_in = torch.tensor([[2, 11, 12], [2, 13, 0]])
    >>> out = model(source, lengths, target_in)
    >>> out.logits.shape, out.weights.shape
    (torch.Size([2, 3, 30]), torch.Size([2, 3, 4]))
    >>> [t.weights.shape[1] for t in model.translate(source, lengths, max_length=5)]
    [3, 2]
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from attnkit.models.bahdanau_decoder import BahdanauDecoder
from attnkit.models.decoder_attention import (
    DecoderAttention,
    build_decoder_align,
    build_decoder_score,
)
from attnkit.models.decoder_state import EncoderMemory, RecurrentState
from attnkit.models.gru_encoder import GRUEncoder
from attnkit.models.inputs import check_batch
from attnkit.models.luong_decoder import LuongDecoder
from attnkit.models.outputs import Seq2SeqOutput, Translation
from attnkit.models.translation import check_translate_arguments, eval_mode, search_and_score

STYLES = ("bahdanau", "luong")
_DEFAULT_SCORE = {"bahdanau": "additive", "luong": "general"}


class RNNSeq2Seq(nn.Module):
    """GRU encoder–decoder with attention, in the style of Bahdanau et al. or Luong et al.

    - ``style="bahdanau"``: bidirectional encoder; the decoder attends with its *previous* state
      ``s_{i-1}`` (default score additive, eq. 23 / Table 2), ``s_0 = tanh(W_s <-h_1)``, maxout
      readout from ``(s_i, E y_{i-1}, c_i)``. See :mod:`attnkit.models.bahdanau_decoder`.
    - ``style="luong"``: stacked unidirectional encoder whose last states start the decoder; the
      decoder attends with its *current* state ``h_t`` (default score general), input feeding,
      ``h~_t = tanh(W_c [c_t; h_t])``, ``logits = W_s h~_t``; local alignments (eq. 27-29). See
      :mod:`attnkit.models.luong_decoder`. With ``bidirectional_encoder`` each layer runs both
      ways with ``hidden_dim / 2`` units per direction, as OpenNMT's ``brnn`` encoder: the
      annotations ``h̄_s = [->h_s; <-h_s]`` and each layer's start ``[->h_S; <-h_1]`` keep the
      size ``hidden_dim``, so the decoder is unchanged.

    Args:
        source_vocab_size, target_vocab_size: vocabulary sizes (ids ``0 … V-1``).
        style: ``"bahdanau"`` or ``"luong"``.
        score: ``"additive"`` (= ``"concat"``), ``"dot"``, ``"general"`` or ``"location"``;
            ``None``: the style's own (additive for Bahdanau, general for Luong).
        align: ``"global"``, ``"local_monotonic"`` (``p_t = t``) or ``"local_predictive"``.
        embed_dim: word embedding size (source and target; also Bahdanau's maxout size).
        hidden_dim: GRU state size (per direction in Bahdanau's encoder).
        num_layers: stacked layers (Luong only; Bahdanau's model has one).
        dropout: on embeddings, between layers, and before the vocabulary projection.
        window: ``D`` of the local alignments.
        input_feeding: Luong's input feeding (ignored for Bahdanau, whose query already is the
            state that read ``c_{i-1}``).
        bidirectional_encoder: Luong only: a bidirectional stack of ``hidden_dim / 2`` units per
            direction in place of the paper's unidirectional one (Bahdanau's is always
            bidirectional).
        query: Bahdanau's query: ``"previous_state"`` (the paper's ``s_{i-1}``) or
            ``"conditional"`` (the conditional GRU's ``s'_i = GRU_1(E y_{i-1}, s_{i-1})``, which
            has read the word just emitted; see :mod:`attnkit.models.bahdanau_decoder`).
        max_source_length: positions scored by the location score.
        pad_id, bos_id, eos_id: special ids.

    Shapes: ``source [B, S]`` long (PAD after the end), ``source_lengths [B]``,
    ``target_in [B, T]`` (BOS y_1 … y_n, PAD after) → :class:`Seq2SeqOutput` with
    ``logits [B, T, V]`` and ``weights [B, T, S]`` (zero on padded source positions).
    """

    taxonomy = {"query_type": "Basic"}  # the query is the decoder's state (§3.3.1)

    def __init__(
        self,
        source_vocab_size: int,
        target_vocab_size: int,
        *,
        style: Literal["bahdanau", "luong"] = "bahdanau",
        score: str | None = None,
        align: str = "global",
        embed_dim: int = 256,
        hidden_dim: int = 256,
        num_layers: int = 1,
        dropout: float = 0.0,
        window: int = 10,
        input_feeding: bool = True,
        query: Literal["previous_state", "conditional"] = "previous_state",
        bidirectional_encoder: bool = False,
        max_source_length: int = 100,
        pad_id: int = 0,
        bos_id: int = 2,
        eos_id: int = 3,
    ) -> None:
        super().__init__()
        if style not in STYLES:
            raise ValueError(f"unknown style {style!r}; expected one of: {', '.join(STYLES)}")
        for name, value in (
            ("source_vocab_size", source_vocab_size),
            ("target_vocab_size", target_vocab_size),
            ("embed_dim", embed_dim),
            ("hidden_dim", hidden_dim),
            ("num_layers", num_layers),
            ("max_source_length", max_source_length),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if style == "luong" and query != "previous_state":
            raise ValueError(
                f"query {query!r} is Bahdanau's; style 'luong' queries its current state"
            )
        if bidirectional_encoder and (style != "luong" or hidden_dim % 2):
            raise ValueError(
                "bidirectional_encoder is Luong's option (Bahdanau's encoder is bidirectional) "
                f"and splits hidden_dim between two directions; got style={style!r}, "
                f"hidden_dim={hidden_dim}"
            )
        if style == "bahdanau" and num_layers != 1:
            raise ValueError(f"style 'bahdanau' has one layer, got num_layers={num_layers}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {dropout!r}")
        self.style = style
        self.vocab_sizes = (source_vocab_size, target_vocab_size)
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.score_name = _DEFAULT_SCORE[style] if score is None else score
        self.brnn = bidirectional_encoder
        self.encoder = GRUEncoder(
            source_vocab_size,
            embed_dim,
            hidden_dim // 2 if bidirectional_encoder else hidden_dim,
            num_layers,
            bidirectional=style == "bahdanau" or bidirectional_encoder,
            dropout=dropout,
            pad_id=pad_id,
        )
        d_key = self.encoder.output_dim
        attention = DecoderAttention(
            build_decoder_score(self.score_name, hidden_dim, d_key, max_source_length),
            build_decoder_align(align, hidden_dim, window),
            hidden_dim,
        )
        self.target_embedding = nn.Embedding(target_vocab_size, embed_dim, padding_idx=pad_id)
        self.dropout = nn.Dropout(dropout)
        self.decoder: BahdanauDecoder | LuongDecoder
        if style == "bahdanau":
            self.decoder = BahdanauDecoder(
                target_vocab_size, embed_dim, hidden_dim, d_key, attention, dropout, query
            )
        else:
            self.decoder = LuongDecoder(
                target_vocab_size,
                embed_dim,
                hidden_dim,
                attention,
                num_layers,
                input_feeding,
                dropout,
            )

    def encode(
        self, source: Tensor, source_lengths: Tensor
    ) -> tuple[EncoderMemory, RecurrentState]:
        """The source memory and the decoder's initial state for a batch."""
        states, final = self.encoder(source, source_lengths)
        mask = torch.arange(source.shape[1], device=source.device) < source_lengths[:, None]
        memory = EncoderMemory(states, self.decoder.attention.key_features(states), mask)
        if isinstance(self.decoder, BahdanauDecoder):
            backward_first = states[:, 0, self.encoder.hidden_dim :]  # <-h_1
            return memory, self.decoder.initial_state(backward_first)
        if self.brnn:  # [L·2, B, d/2], directions inner (nn.GRU's h_n) → [L, B, d]
            final = final.unflatten(0, (-1, 2)).permute(0, 2, 1, 3).flatten(-2)
        return memory, self.decoder.initial_state(final)

    def forward(self, source: Tensor, source_lengths: Tensor, target_in: Tensor) -> Seq2SeqOutput:
        """Teacher-forced logits and attention weights (see the class docstring for shapes)."""
        check_batch(source, source_lengths, target_in, vocab_sizes=self.vocab_sizes)
        memory, state = self.encode(source, source_lengths)
        embedded = self.dropout(self.target_embedding(target_in))  # E y_{t-1} [B, T, E]
        features, weights = [], []
        # unbind, not embedded[:, t]: the backward of T slices would build T full-size zero
        # gradients; unbind's backward stacks them once.
        for embedded_t in embedded.unbind(1):
            f, a = self.decoder.step(embedded_t, state, memory)
            features.append(f)
            weights.append(a)
        # The vocabulary projection, the largest product, runs once over all positions.
        logits = self.decoder.readout(torch.stack(features, 1))
        return Seq2SeqOutput(logits=logits, weights=torch.stack(weights, 1))

    def translate(
        self,
        source: Tensor,
        source_lengths: Tensor,
        *,
        beam_size: int = 1,
        max_length: int = 50,
        length_penalty: float = 1.0,
    ) -> list[Translation]:
        """Translate a batch: greedy when ``beam_size == 1``, else beam search.

        Runs without gradients and in eval mode (no dropout), restoring the module's mode after.
        ``length_penalty`` ``α`` normalises beam scores by ``|y|^α`` (``Translation.score``).

        Returns:
            one :class:`Translation` per sentence.
        """
        check_batch(source, source_lengths, vocab_sizes=self.vocab_sizes)
        check_translate_arguments(beam_size, max_length, length_penalty)
        with torch.no_grad(), eval_mode(self):
            memory, state = self.encode(source, source_lengths)
            if beam_size > 1:
                memory = memory.repeat_interleave(beam_size)
                index = torch.arange(source.shape[0], device=source.device)
                state.reorder(index.repeat_interleave(beam_size))

            def step(tokens: Tensor, caches: list[RecurrentState]) -> Tensor:
                embedded = self.target_embedding(tokens[:, -1])
                features, _ = self.decoder.step(embedded, caches[0], memory)
                return self.decoder.readout(features)[:, None]

            return search_and_score(
                self,
                source,
                source_lengths,
                step,
                [state],
                beam_size=beam_size,
                max_length=max_length,
                length_penalty=length_penalty,
            )
