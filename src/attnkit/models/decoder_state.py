"""What a recurrent decoder carries between steps: the encoder's memory and its own state.

Both are reordered along the batch by beam search (``attnkit.layers.decoding.beam_search``
calls ``cache.reorder(index)`` on every cache after choosing the surviving beams).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from torch import Tensor


@dataclass(frozen=True)
class EncoderMemory:
    """The source side of attention, computed once per sentence.

    Attributes:
        values: ``[B, S, d_k]``: the encoder states ``h_j`` (keys and values of the attention).
        key_features: ``[B, S, ·]``: the score's per-key part (``U_a h_j`` of the additive
            score), so each decoding step only transforms its query.
        mask: ``[B, S]`` bool, True on real source positions.
    """

    values: Tensor
    key_features: Tensor
    mask: Tensor

    def repeat_interleave(self, repeats: int) -> EncoderMemory:
        """Each sentence ``repeats`` times in a row (one copy per beam)."""
        return replace(
            self,
            values=self.values.repeat_interleave(repeats, 0),
            key_features=self.key_features.repeat_interleave(repeats, 0),
            mask=self.mask.repeat_interleave(repeats, 0),
        )


class RecurrentState:
    """A recurrent decoder's state between steps, updated in place.

    Attributes:
        hidden: one ``[B, d]`` tensor per layer (``s_{i-1}`` of Bahdanau, ``h_{t-1}`` of Luong).
        feed: ``[B, d]`` attentional vector ``h~_{t-1}`` fed back as input (Luong's input
            feeding), or ``None``.
        position: the target position of the next step (the local-monotonic ``p_t = t``).
    """

    def __init__(self, hidden: list[Tensor], feed: Tensor | None = None, position: int = 0):
        self.hidden = hidden
        self.feed = feed
        self.position = position

    def reorder(self, index: Tensor) -> None:
        """Keep rows ``index`` (beam search's surviving beams), in that order."""
        self.hidden = [h.index_select(0, index) for h in self.hidden]
        if self.feed is not None:
            self.feed = self.feed.index_select(0, index)
