"""Key/value caches for incremental (autoregressive) decoding.

A decoder's self-attention at step ``t`` needs the keys and values of every earlier token; they do
not change once computed (causal masking: a token never sees later ones), so they are projected
once and kept. Each cached key carries its **position**, which makes the cache correct for

- chunks: ``M`` new queries at positions ``p … p+M-1`` attend every cached key with position
  ``<= `` their own (attnkit's causal mask is bottom-right aligned, the same thing when slots and
  positions agree);
- ragged batches: a right-padded prompt marks its padding slots with position ``-1`` (never
  attended), and each batch element continues from its own length;
- sliding windows (Mistral-style): keys with positions no future query can see
  (``position <= next - window``) are evicted, so memory stays ``O(window)``;
- grouped-query attention: the cache holds the ``G`` key/value heads, not the ``H`` query heads.

Caches are for inference: buffers are written in place, so run decoding under
``torch.no_grad()`` / ``torch.inference_mode()``.

Shapes (the legend of :mod:`attnkit`): B batch, G key/value heads, N_max capacity (slots), N slots
in use (the keys), M new tokens (the queries), D/Dv.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


class KVCache:
    """The self-attention keys and values of one layer, with their positions.

    Buffers are allocated on the first :meth:`append` (from the batch size, heads, sizes, dtype
    and device of the keys), so one cache object can be created before anything is known.

    Args:
        capacity: slots ``N_max``; appending beyond it raises (a sliding-window cache evicts first,
            so it needs ``N_max >= window - 1 + M`` for chunks of ``M``).
        window: if given, a query at position ``p`` sees keys at positions ``p - window < j <= p``
            (exactly ``window`` keys, itself included, as :func:`attnkit.masks.sliding_window`),
            and keys no future query can see are evicted after every append.

    Example::

        >>> cache = KVCache(capacity=16)
        >>> k = v = torch.randn(2, 4, 3, 8)          # [B, G, M, D]
        >>> k_all, v_all, k_pos, q_pos = cache.append(k, v)
        >>> k_all.shape, q_pos.tolist()
        (torch.Size([2, 4, 3, 8]), [[0, 1, 2], [0, 1, 2]])
    """

    def __init__(self, capacity: int, *, window: int | None = None) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise ValueError(f"capacity must be an int >= 0, got {capacity!r}")
        if window is not None and (
            isinstance(window, bool) or not isinstance(window, int) or window < 1
        ):
            raise ValueError(f"window must be a positive int or None, got {window!r}")
        self.capacity, self.window = capacity, window
        self.size = 0  # slots in use
        self.k: Tensor | None = None  # [B, G, N_max, D]
        self.v: Tensor | None = None  # [B, G, N_max, Dv]
        self.positions: Tensor | None = None  # [B, N_max] long; -1 = empty or padding
        self.next_position: Tensor | None = None  # [B] long: position of each row's next token

    def __repr__(self) -> str:
        return f"KVCache(size={self.size}, capacity={self.capacity}, window={self.window})"

    def _allocate(self, k: Tensor, v: Tensor) -> None:
        b, g, _, d_k = k.shape
        self.k = k.new_zeros(b, g, self.capacity, d_k)
        self.v = v.new_zeros(b, g, self.capacity, v.shape[-1])
        self.positions = torch.full((b, self.capacity), -1, dtype=torch.long, device=k.device)
        self.next_position = torch.zeros(b, dtype=torch.long, device=k.device)

    def query_positions(self, length: int, batch: int, device: torch.device) -> Tensor:
        """Positions ``[B, M]`` of the next ``length`` tokens (``0 … M-1`` for an empty cache)."""
        if self.next_position is None:
            start = torch.zeros(batch, dtype=torch.long, device=device)
        elif self.next_position.shape[0] != batch:
            raise ValueError(
                f"this cache holds [B={self.next_position.shape[0]}, ...] rows, got {batch} rows"
            )
        else:
            start = self.next_position
        return start[:, None] + torch.arange(length, device=device)

    def append(
        self, k: Tensor, v: Tensor, lengths: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Store ``M`` new keys/values and return everything attention needs.

        Args:
            k: new keys ``[B, G, M, D]`` (already rotated, if rotary positions are used).
            v: new values ``[B, G, M, Dv]``.
            lengths: ``[B]``, how many of the ``M`` tokens are real in each row (right padding of
                a ragged prompt); the rest get position ``-1`` and are never attended.

        Returns:
            ``(k_all [B, G, N, D], v_all [B, G, N, Dv], key_positions [B, N],
            query_positions [B, M])``: views of the cache including the new tokens.

        Raises:
            ValueError: if the tokens do not fit in the remaining capacity, or shapes differ from
                what the cache holds.
        """
        if k.dim() != 4 or v.dim() != 4 or k.shape[:3] != v.shape[:3]:
            raise ValueError(
                f"k and v must be [B, G, M, D] with equal B, G, M, got {tuple(k.shape)} and "
                f"{tuple(v.shape)}"
            )
        if self.k is None:
            self._allocate(k, v)
        assert self.k is not None and self.v is not None
        assert self.positions is not None and self.next_position is not None
        b, g, t, _ = k.shape
        if (b, g) != tuple(self.k.shape[:2]) or k.shape[-1] != self.k.shape[-1]:
            raise ValueError(
                f"this cache holds [B={self.k.shape[0]}, G={self.k.shape[1]}, ..., "
                f"d_k={self.k.shape[-1]}] keys, got {tuple(k.shape)}"
            )
        if self.size + t > self.capacity:
            raise ValueError(
                f"KV cache capacity exceeded: it holds {self.size} of {self.capacity} slots, "
                f"cannot append {t} more"
            )
        q_pos = self.query_positions(t, b, k.device)  # [B, M]
        if lengths is not None:
            lengths = torch.as_tensor(lengths, device=k.device)
            if lengths.shape != (b,) or (lengths < 0).any() or (lengths > t).any():
                raise ValueError(f"lengths must be [B={b}] in [0, {t}], got {lengths.tolist()}")
            real = torch.arange(t, device=k.device) < lengths[:, None]
            k_pos = torch.where(real, q_pos, torch.full_like(q_pos, -1))
            advance = lengths
        else:
            k_pos, advance = q_pos, torch.full((b,), t, device=k.device, dtype=torch.long)
        end = self.size + t
        self.k[:, :, self.size : end] = k
        self.v[:, :, self.size : end] = v
        self.positions[:, self.size : end] = k_pos
        self.size = end
        self.next_position = self.next_position + advance
        out = (
            self.k[:, :, :end],
            self.v[:, :, :end],
            self.positions[:, :end].clone(),  # eviction below rewrites the buffer in place
            q_pos,
        )
        if self.window is not None:
            out = (out[0].clone(), out[1].clone(), out[2], out[3])
            self._evict()
        return out

    def _evict(self) -> None:
        """Drop the slots no future query can see: position ``<= next - window`` (or padding)."""
        assert self.k is not None and self.v is not None and self.window is not None
        assert self.positions is not None and self.next_position is not None
        pos = self.positions[:, : self.size]
        needed = (pos > (self.next_position[:, None] - self.window)).any(0)  # [N]
        keep = needed.nonzero().squeeze(1)
        if keep.numel() == self.size:
            return
        n = keep.numel()
        self.k[:, :, :n] = self.k[:, :, keep]
        self.v[:, :, :n] = self.v[:, :, keep]
        self.positions[:, :n] = self.positions[:, keep]
        self.positions[:, n:] = -1
        self.size = n

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (beam search: each beam continues a chosen parent)."""
        if self.k is None:
            return
        assert self.v is not None and self.positions is not None
        assert self.next_position is not None
        self.k, self.v = self.k.index_select(0, index), self.v.index_select(0, index)
        self.positions = self.positions.index_select(0, index)
        self.next_position = self.next_position.index_select(0, index)


@dataclass
class CrossAttentionCache:
    """The cross-attention keys/values of one decoder layer: projected from the encoder's memory
    once, on the first decoding step, then reused (they do not depend on the target).

    Attributes:
        k: the memory's keys ``[B, G, N, D]``; ``None`` before the first step.
        v: the memory's values ``[B, G, N, Dv]``; ``None`` before the first step.
        allowed: bool ``[B, 1, 1, N]`` (``True`` = a real memory position), or ``None``.

    Example::

        >>> cache = CrossAttentionCache()  # filled by the decoder layer's first step
        >>> cache.k is None
        True
    """

    k: Tensor | None = None
    v: Tensor | None = None
    allowed: Tensor | None = None

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index``."""
        if self.k is not None and self.v is not None:
            self.k, self.v = self.k.index_select(0, index), self.v.index_select(0, index)
        if self.allowed is not None and self.allowed.shape[0] > 1:
            self.allowed = self.allowed.index_select(0, index)


@dataclass
class DecoderLayerCache:
    """What one ``TransformerDecoderLayer`` keeps between decoding steps.

    Attributes:
        self_attn: the self-attention's keys and values.
        cross_attn: the memory's projected keys and values.

    Example::

        >>> layer = ak.layers.TransformerDecoderLayer(16, 2, 32, batch_first=True).eval()
        >>> cache = DecoderLayerCache(KVCache(capacity=8), CrossAttentionCache())
        >>> memory = torch.randn(2, 6, 16)
        >>> with torch.no_grad():
        ...     for step in range(3):  # one target token at a time
        ...         y = layer(torch.randn(2, 1, 16), memory, cache=cache)
        >>> y.shape, cache.self_attn.size
        (torch.Size([2, 1, 16]), 3)
    """

    self_attn: KVCache
    cross_attn: CrossAttentionCache

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (beam search) in both caches."""
        self.self_attn.reorder(index)
        self.cross_attn.reorder(index)


def reorder_caches(caches: list[KVCache] | list[DecoderLayerCache], index: Tensor) -> None:
    """Reorder every layer's cache along the batch (see :meth:`KVCache.reorder`).

    Args:
        caches: one cache per layer.
        index: int ``[B']``, the batch rows to keep, in their new order (beam search).

    Example::

        >>> caches = [KVCache(capacity=4) for _ in range(2)]
        >>> for cache in caches:
        ...     _ = cache.append(torch.randn(3, 1, 2, 8), torch.randn(3, 1, 2, 8))
        >>> reorder_caches(caches, torch.tensor([2, 2, 0]))
        >>> caches[0].k.shape  # [B, G, N_max, D]: rows 2, 2, 0 of the batch
        torch.Size([3, 1, 4, 8])
    """
    for cache in caches:
        cache.reorder(index)
