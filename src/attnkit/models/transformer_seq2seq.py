"""The Transformer translation model of Vaswani et al. (2017) on attnkit's layers (survey §3.3.2,
multi-head attention, eq. 39-42; self-attention, §3.3.1).

Example::

    >>> import torch
    >>> from attnkit.models import TransformerSeq2Seq
    >>> model = TransformerSeq2Seq(20, 30, d_model=16, nhead=2, num_layers=1, dim_feedforward=32)
    >>> source, lengths = torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0]]), torch.tensor([3, 2])
    >>> out = model(source, lengths, torch.tensor([[2, 11, 12], [2, 13, 0]]))
    >>> out.logits.shape, out.weights.shape
    (torch.Size([2, 3, 30]), torch.Size([2, 3, 4]))

With an alignment head (Garg et al. 2019), ``out.alignment`` is that head's attention::

    >>> model = TransformerSeq2Seq(20, 30, d_model=16, nhead=2, num_layers=2,
    ...                            dim_feedforward=32, alignment_layer=-2)
    >>> model(source, lengths, torch.tensor([[2, 11, 12], [2, 13, 0]])).alignment.shape
    torch.Size([2, 3, 4])
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.layers.attention import LayerOutput
from attnkit.layers.decoding import seq2seq_step
from attnkit.layers.positional import SinusoidalPositionalEncoding
from attnkit.layers.transformer import (
    Transformer,
    TransformerDecoder,
    kind_attention,
)
from attnkit.models.inputs import check_batch
from attnkit.models.outputs import Seq2SeqOutput, Translation
from attnkit.models.translation import check_translate_arguments, eval_mode, search_and_score

#: attention kinds that can be the decoder's self-attention: causal, and the same when decoding
#: one token at a time against cached keys (one query, ``S`` keys) as over the whole target
DECODER_KINDS = ("exact", "sliding_window", "linear", "performer", "synthesizer_dense")

#: why each other known kind cannot be the decoder's self-attention
NOT_DECODER_KINDS = {
    "nystrom": "cannot be causal (every landmark averages keys from the whole sequence)",
    "linformer": "cannot be causal (its length projections mix future positions into each key)",
    "longformer": "needs as many queries as keys, but cached decoding attends one new query",
    "bigbird": "needs as many queries as keys, but cached decoding attends one new query",
    "lsh": "shares queries and keys (Reformer), but cached decoding attends one new query to "
    "earlier keys",
    "synthesizer_random": "reads its score matrix's rows by the query's place in the call, "
    "which cached decoding (one query at a time) does not give",
}


def check_decoder_attention(kind: str) -> None:
    """Refuse an attention kind that cannot serve the decoder's causal self-attention (see
    :data:`DECODER_KINDS`; the cross-attention is always exact, see the class docstring)."""
    if kind in DECODER_KINDS:
        return
    reason = NOT_DECODER_KINDS.get(kind, "is not known to decode causally one token at a time")
    raise ValueError(
        f"the decoder's self-attention cannot be {kind!r}: it {reason}; use one of "
        + ", ".join(DECODER_KINDS)
    )


def _alignment_head(
    layer: int | None, head: int, num_layers: int, nhead: int
) -> tuple[int | None, int]:
    """``(layer, head)`` of the alignment head, the layer counted from the bottom; ``(None,
    head)`` without one. Refuses a layer or head the model does not have."""
    if layer is None:
        return None, head
    if (
        isinstance(layer, bool)
        or not isinstance(layer, int)
        or not -num_layers <= layer < num_layers
    ):
        raise ValueError(
            f"alignment_layer must be an int in [{-num_layers}, {num_layers - 1}] for "
            f"{num_layers} decoder layers (or None), got {layer!r}"
        )
    if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < nhead:
        raise ValueError(
            f"alignment_head must be an int in [0, {nhead - 1}] for {nhead} heads, got {head!r}"
        )
    return layer % num_layers, head


class TransformerSeq2Seq(nn.Module):
    """Encoder–decoder Transformer: embeddings ``· sqrt(d_model)`` + sinusoidal positions
    (Vaswani et al. §3.4-3.5), :class:`attnkit.layers.Transformer` (post-norm, as the paper), and
    an output projection tied to the target embeddings (§3.4) or separate.

    ``Seq2SeqOutput.weights`` is the last decoder layer's cross-attention, averaged over heads
    (before dropout); rows sum to 1 over the real source positions.

    **Alignment head** (Garg et al. 2019, "Jointly Learning to Align and Translate with
    Transformer Models"): with ``alignment_layer`` set, head ``alignment_head`` of that decoder
    layer's cross-attention is the one the training pipeline supervises with word alignments
    (the alignment loss is added to the translation loss with a weight; the other heads stay
    free). As in Garg et al., the head is read with the *full target context*: ``forward`` runs
    the decoder's layers up to the alignment layer a second time without the causal mask (target
    padding masked), so the row that predicts ``y_t`` (row ``t``, whose input is ``y_{t-1}``)
    has also seen ``y_t`` and the later words; its attention is the alignment of ``y_t``
    (``step="output"`` of :func:`attnkit.evaluate.decoder_step_rows`). That pass runs *before*
    the translation pass, so a recorder that keeps each module's most recent call
    (:func:`attnkit.interpret.record`) still sees the translation pass. It costs
    ``alignment_layer + 1`` more decoder layers per ``forward``; decoding (``translate``'s
    search) does not run it. ``Seq2SeqOutput.alignment`` holds it, ``[B, T, S]``, before
    dropout, zero on padded source positions; the translation pass is unchanged.

    Efficient attention (``attnkit.efficient``): ``attention`` is the kind of every encoder
    self-attention, ``decoder_attention`` that of every decoder self-attention (one of
    :data:`DECODER_KINDS`: causal, and exact under cached decoding). The cross-attention is
    always exact: its weights are the model's alignment (``Seq2SeqOutput.weights``, heatmaps,
    AER, supervised attention), and the efficient kinds do not form them. Efficient kinds run
    without attention-weight dropout (:func:`~attnkit.layers.transformer.kind_attention`).

    Args:
        source_vocab_size, target_vocab_size: vocabulary sizes.
        d_model, nhead, num_layers, dim_feedforward, dropout: as the paper's (``num_layers``
            encoder layers and as many decoder layers).
        max_length: the longest source or target (positions tabulated).
        tie_embeddings: the output projection is the target embedding matrix (plus a bias).
        pad_id, bos_id, eos_id: special ids.
        attention: kind of the encoder's self-attention (``"exact"`` or an efficient kind).
        decoder_attention: kind of the decoder's self-attention (one of :data:`DECODER_KINDS`).
        alignment_layer: the decoder layer of the alignment head, 0 = the bottom one; negative
            counts from the top (Garg et al.'s choice, the penultimate layer, is ``-2``).
            ``None`` (default): no alignment head, ``Seq2SeqOutput.alignment`` is ``None``.
        alignment_head: which head of that layer's cross-attention, ``0 <= h < nhead``.

    Shapes: as :class:`~attnkit.models.RNNSeq2Seq`: ``source [B, S]``, ``source_lengths [B]``,
    ``target_in [B, T]`` → ``logits [B, T, V]``, ``weights [B, T, S]``.
    """

    def __init__(
        self,
        source_vocab_size: int,
        target_vocab_size: int,
        *,
        d_model: int = 256,
        nhead: int = 4,
        num_layers: int = 3,
        dim_feedforward: int = 1024,
        dropout: float = 0.1,
        max_length: int = 256,
        tie_embeddings: bool = True,
        pad_id: int = 0,
        bos_id: int = 2,
        eos_id: int = 3,
        attention: str = "exact",
        decoder_attention: str = "exact",
        alignment_layer: int | None = None,
        alignment_head: int = 0,
    ) -> None:
        super().__init__()
        for name, value in (
            ("source_vocab_size", source_vocab_size),
            ("target_vocab_size", target_vocab_size),
            ("d_model", d_model),
            ("nhead", nhead),
            ("num_layers", num_layers),
            ("dim_feedforward", dim_feedforward),
            ("max_length", max_length),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if d_model % nhead:
            raise ValueError(f"d_model ({d_model}) must be divisible by nhead ({nhead})")
        check_decoder_attention(decoder_attention)
        self.alignment_layer, self.alignment_head = _alignment_head(
            alignment_layer, alignment_head, num_layers, nhead
        )
        self.attention, self.decoder_attention = attention, decoder_attention
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.vocab_sizes = (source_vocab_size, target_vocab_size)
        self.d_model, self.max_length = d_model, max_length
        self.source_embedding = nn.Embedding(source_vocab_size, d_model, padding_idx=pad_id)
        self.target_embedding = nn.Embedding(target_vocab_size, d_model, padding_idx=pad_id)
        for embedding in (self.source_embedding, self.target_embedding):
            # N(0, d^-1/2): times sqrt(d) the inputs have unit scale, and so do tied logits.
            nn.init.normal_(embedding.weight, std=d_model**-0.5)
            with torch.no_grad():
                embedding.weight[pad_id].zero_()
        self.positions = SinusoidalPositionalEncoding(d_model, max_length, dropout)
        self.transformer = Transformer(
            d_model,
            nhead,
            num_layers,
            num_layers,
            dim_feedforward,
            dropout,
            batch_first=True,
            attention=kind_attention(attention, d_model, nhead),
            decoder_attention=kind_attention(decoder_attention, d_model, nhead),
        )
        self.tie_embeddings = tie_embeddings
        self.output = None if tie_embeddings else nn.Linear(d_model, target_vocab_size, bias=False)
        self.output_bias = nn.Parameter(torch.zeros(target_vocab_size))

    def _decoder(self) -> TransformerDecoder:
        decoder = self.transformer.decoder
        assert isinstance(decoder, TransformerDecoder)  # built here, never a custom one
        return decoder

    def _embed(self, embedding: nn.Embedding, tokens: Tensor, start: int = 0) -> Tensor:
        if start + tokens.shape[1] > self.max_length:
            raise ValueError(
                f"sequences of at most max_length={self.max_length} tokens, got positions up to "
                f"{start + tokens.shape[1]}"
            )
        positions = torch.arange(start, start + tokens.shape[1], device=tokens.device)
        x = embedding(tokens) * math.sqrt(self.d_model)
        return self.positions(x, positions.expand(tokens.shape[0], -1))

    def _head(self, x: Tensor) -> Tensor:
        weight = self.target_embedding.weight if self.output is None else self.output.weight
        return F.linear(x, weight, self.output_bias)

    def encode(self, source: Tensor, source_lengths: Tensor) -> tuple[Tensor, Tensor]:
        """``(memory [B, S, d_model], padding [B, S])`` with ``padding`` True on PAD positions."""
        padding = torch.arange(source.shape[1], device=source.device) >= source_lengths[:, None]
        memory = self.transformer.encode(
            self._embed(self.source_embedding, source), src_key_padding_mask=padding
        )
        return memory, padding

    def forward(self, source: Tensor, source_lengths: Tensor, target_in: Tensor) -> Seq2SeqOutput:
        """Teacher-forced logits and the last layer's cross-attention (class docstring)."""
        check_batch(source, source_lengths, target_in, vocab_sizes=self.vocab_sizes)
        memory, padding = self.encode(source, source_lengths)
        alignment = None
        if self.alignment_layer is not None:  # first, so the translation pass is the latest call
            alignment = self._alignment(target_in, memory, padding)
        # the last layer's cross-attention weights, asked of its module (as Hugging Face models
        # do with output_attentions): in the autograd graph, so an alignment loss on them
        # (supervised attention) has gradients
        decoded = self.transformer.decode(
            self._embed(self.target_embedding, target_in),
            memory,
            memory_key_padding_mask=padding,
            tgt_is_causal=True,
            need_weights=True,
        )
        assert isinstance(decoded, LayerOutput)
        weights = decoded.weights.mean(1)  # [B, H, T, S] → [B, T, S]
        return Seq2SeqOutput(
            logits=self._head(decoded.output), weights=weights, alignment=alignment
        )

    def _alignment(self, target_in: Tensor, memory: Tensor, padding: Tensor) -> Tensor:
        """The alignment head's cross-attention ``[B, T, S]`` with the full target context: the
        decoder's layers up to the alignment layer, without the causal mask (class docstring)."""
        assert self.alignment_layer is not None
        x = self._embed(self.target_embedding, target_in)
        target_padding = target_in == self.pad_id
        layers = self._decoder().layers
        for layer in layers[: self.alignment_layer]:
            x = layer(
                x,
                memory,
                tgt_key_padding_mask=target_padding,
                memory_key_padding_mask=padding,
                tgt_is_causal=False,
            )
        # asked of the layer's own module, per head, before dropout (as the main pass does)
        aligned = layers[self.alignment_layer](
            x,
            memory,
            tgt_key_padding_mask=target_padding,
            memory_key_padding_mask=padding,
            tgt_is_causal=False,
            need_weights=True,
        )
        return aligned.weights[:, self.alignment_head]

    def step_function(
        self, memory: Tensor, padding: Tensor, incremental: bool
    ) -> Callable[[Tensor, object], Tensor]:
        """The decoding step over ``memory`` (already repeated per beam): with ``incremental``
        the tokens are the next ones (caches given), else the whole target so far."""
        position = 0

        def embed(tokens: Tensor) -> Tensor:
            nonlocal position
            start = position if incremental else 0
            position = start + tokens.shape[1]
            return self._embed(self.target_embedding, tokens, start)

        return seq2seq_step(self.transformer, embed, self._head, memory, padding)

    def translate(
        self,
        source: Tensor,
        source_lengths: Tensor,
        *,
        beam_size: int = 1,
        max_length: int = 50,
        length_penalty: float = 1.0,
        use_cache: bool = True,
    ) -> list[Translation]:
        """Translate a batch: greedy when ``beam_size == 1``, else beam search (as
        :meth:`RNNSeq2Seq.translate`). ``use_cache=False`` recomputes the whole target at every
        step instead of keeping keys/values (slower; the same tokens).
        """
        check_batch(source, source_lengths, vocab_sizes=self.vocab_sizes)
        check_translate_arguments(beam_size, max_length, length_penalty)
        if max_length + 1 > self.max_length:
            raise ValueError(
                f"max_length + 1 must be at most the model's max_length={self.max_length}, "
                f"got {max_length}"
            )
        with torch.no_grad(), eval_mode(self):
            memory, padding = self.encode(source, source_lengths)
            memory = memory.repeat_interleave(beam_size, 0)
            padding = padding.repeat_interleave(beam_size, 0)
            caches = self._decoder().new_caches(max_length + 1) if use_cache else None
            return search_and_score(
                self,
                source,
                source_lengths,
                self.step_function(memory, padding, incremental=use_cache),
                caches,
                beam_size=beam_size,
                max_length=max_length,
                length_penalty=length_penalty,
            )
