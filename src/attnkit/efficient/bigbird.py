"""BigBird attention (Zaheer et al. 2020, "Big Bird: Transformers for Longer Sequences", §2 and
App. D "blockified" implementation): each block of queries attends a sliding window of key
blocks, ``g`` global blocks and ``r`` random blocks; the global blocks' queries attend every key.

The sequence is cut into blocks of ``block`` positions (BigBird-ITC: the global tokens are the
first ``global_blocks`` blocks of the sequence). Query block ``i`` attends key blocks

    window: i - w … i + w   (w = window_blocks // 2 on each side),
    global: 0 … g - 1,
    random: r blocks drawn uniformly from the others (seeded: ``seed`` fixes the pattern),

and a global query block attends every key block. With ``causal=True`` no query sees a later key,
and random blocks are drawn from earlier blocks only. The computation is block-sparse: for each of
the ``K = 2w + 1 + g + r`` slots the keys of one block per query block are gathered
(``[N/b, B, H, K·b, d]``: O(N·K·d) memory, never N × N), and each query block's softmax over its
``K·b`` keys runs in torch's fused ``scaled_dot_product_attention`` with the pattern as its mask. :func:`bigbird_blocks` returns the
pattern, from which the equivalent dense mask is built (and the tests do so).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit.core.call import AttentionOutput
from attnkit.core.engine import attention
from attnkit.core.kinds import KINDS
from attnkit.efficient._inputs import EfficientCall, EfficientKind, KindOptions, check_positive_int
from attnkit.efficient.sliding_window import _fused_band, _gather_keys

if TYPE_CHECKING:
    from typing_extensions import Unpack

TAXONOMY: dict[str, str | list[str]] = {
    "scoring": "Scaled-Multiplicative",
    "alignment": ["Local", "Global"],
}


def bigbird_blocks(
    num_blocks: int,
    *,
    window_blocks: int = 3,
    global_blocks: int = 1,
    random_blocks: int = 2,
    causal: bool = False,
    seed: int = 0,
) -> Tensor:
    """The key blocks each query block attends: long ``[num_blocks, K]``, ``-1`` = empty slot.

    Rows of global query blocks are left empty here (they attend every key, computed densely).

    Args:
        num_blocks: query (and key) blocks.
        window_blocks: odd number of key blocks in the sliding window.
        global_blocks: leading global blocks.
        random_blocks: random key blocks per query block.
        causal: only key blocks up to the query block's own.
        seed: fixes the random blocks.

    Returns:
        Long ``[num_blocks, K]``: the key blocks of each query block, ``-1`` for an empty slot.

    Example::

        >>> bigbird_blocks(6, seed=0)[1]  # window 0-2, global 0, random 3 and 5
        tensor([ 0,  1,  2,  3,  5, -1])
    """
    if window_blocks < 1 or window_blocks % 2 == 0:
        raise ValueError(f"window_blocks must be odd and >= 1, got {window_blocks}")
    if global_blocks < 0 or random_blocks < 0:
        raise ValueError(
            f"global_blocks and random_blocks must be >= 0, got {global_blocks}, {random_blocks}"
        )
    generator = torch.Generator().manual_seed(seed)
    half = window_blocks // 2
    width = window_blocks + global_blocks + random_blocks
    table = torch.full((num_blocks, width), -1, dtype=torch.long)
    for i in range(global_blocks, num_blocks):
        last = i if causal else num_blocks - 1
        chosen = [j for j in range(i - half, i + half + 1) if 0 <= j <= last]
        chosen += [j for j in range(min(global_blocks, last + 1)) if j not in chosen]
        others = [j for j in range(last + 1) if j not in chosen]
        if others and random_blocks:
            pick = torch.randperm(len(others), generator=generator)[:random_blocks]
            chosen += [others[p] for p in sorted(pick.tolist())]
        table[i, : len(chosen)] = torch.tensor(chosen, dtype=torch.long)
    return table


@KINDS.register("bigbird")
class BigBirdAttention(EfficientKind):
    """Block-sparse window + global + random attention (self-attention: ``M == N``); the
    attention kind ``"bigbird"``, with a fixed random pattern (``seed``).

    Args:
        block: positions per block ``b`` (the last block may be shorter).
        window_blocks: odd number of key blocks in the sliding window (3 in the paper).
        global_blocks: ``g``, leading blocks that attend and are attended by all.
        random_blocks: ``r`` random key blocks per query block.
        seed: fixes the random blocks (same pattern on every call with this seed).

    Called as an attention kind (:class:`~attnkit.efficient._inputs.KindOptions`; any bool
    mask): ``q, k, v`` ``[B, H, L, d]``, ``[B, H_kv, L, d]``, ``[B, H_kv, L, d_v]`` (or 3-D)
    → :class:`~attnkit.AttentionOutput` with ``context [B, H, L, d_v]``.

    Example::

        >>> x = torch.randn(2, 4, 64, 8)
        >>> BigBirdAttention(block=8)(x, x, x).context.shape
        torch.Size([2, 4, 64, 8])
    """

    name = "bigbird"
    taxonomy = TAXONOMY

    def __init__(
        self,
        block: int = 64,
        window_blocks: int = 3,
        global_blocks: int = 1,
        random_blocks: int = 2,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.block = check_positive_int("block", block)
        self.window_blocks, self.global_blocks = window_blocks, global_blocks
        self.random_blocks, self.seed = random_blocks, seed

    def attend(self, call: EfficientCall) -> AttentionOutput:
        call.require_self_attention(self.name)
        block = self.block
        b, h, m, n = call.shape
        if n == 0:
            return call.output(call.q.new_zeros(b, h, 0, call.v.shape[-1]))
        nb = math.ceil(n / block)
        table = bigbird_blocks(
            nb,
            window_blocks=self.window_blocks,
            global_blocks=self.global_blocks,
            random_blocks=self.random_blocks,
            causal=call.causal,
            seed=self.seed,
        ).to(call.q.device)
        pad = nb * block - n
        d, dv = call.q.shape[-1], call.v.shape[-1]
        qb = F.pad(call.q, (0, 0, 0, pad)).view(b, h, nb, block, d)
        kb = F.pad(call.k, (0, 0, 0, pad)).view(b, h, nb, block, d)
        vb = F.pad(call.v, (0, 0, 0, pad)).view(b, h, nb, block, dv)
        slots = table.clamp_min(0)  # [nb, K]
        # One gathered key block per query block and slot: [nb, B, H, K·b, d], O(N·K·b·d), never N × N.
        band_k = kb[:, :, slots].flatten(3, 4).permute(2, 0, 1, 3, 4)
        band_v = vb[:, :, slots].flatten(3, 4).permute(2, 0, 1, 3, 4)

        offsets = torch.arange(block, device=call.q.device)
        key_idx = (slots[:, :, None] * block + offsets).flatten(1)  # [nb, K·b]
        allowed = ((table >= 0)[:, :, None].expand(-1, -1, block).flatten(1)) & (key_idx < n)
        allowed = allowed[None, None, :, None, :]  # [1, 1, nb, 1, K·b]
        if call.causal:
            query_idx = torch.arange(nb, device=call.q.device)[:, None] * block + offsets  # [nb, b]
            allowed = allowed & (key_idx[:, None, :] <= query_idx[:, :, None])
        if call.mask is not None:
            allowed = allowed & _gather_keys(call.mask, key_idx.clamp(max=n - 1), m, block)
        # softmax(q kᵀ) v of each query block over its K·b keys in torch's fused kernel
        context = _fused_band(
            qb.permute(2, 0, 1, 3, 4), band_k, band_v, allowed.permute(2, 0, 1, 3, 4), call.scale
        )  # [nb, B, H, b, d_v]
        context = context.permute(1, 2, 0, 3, 4).reshape(b, h, nb * block, dv)[:, :, :n]

        rows = min(self.global_blocks * block, n)
        if rows:  # global query blocks attend every key: dense rows, O(g·b·N)
            dense_mask = (
                None
                if call.mask is None
                else call.mask[..., :rows, :]
                if call.mask.shape[-2] != 1
                else call.mask
            )
            if call.causal:
                tri = torch.ones(rows, n, dtype=torch.bool, device=call.q.device).tril()
                dense_mask = tri if dense_mask is None else dense_mask & tri
            top = attention(call.q[:, :, :rows], call.k, call.v, mask=dense_mask, scale=call.scale)
            context = torch.cat([top.context, context[:, :, rows:]], 2)
        return call.output(context)

    def extra_repr(self) -> str:
        return (
            f"block={self.block}, window_blocks={self.window_blocks}, "
            f"global_blocks={self.global_blocks}, random_blocks={self.random_blocks}, "
            f"seed={self.seed}"
        )


def bigbird_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    block: int = 64,
    window_blocks: int = 3,
    global_blocks: int = 1,
    random_blocks: int = 2,
    seed: int = 0,
    **options: Unpack[KindOptions],
) -> AttentionOutput:
    """:class:`BigBirdAttention` as a function (options: :class:`KindOptions`).

    Args:
        q: queries ``[B, H, L, d]`` (or ``[B, L, d]``; self-attention: ``M == N == L``).
        k: keys ``[B, H_kv, L, d]``.
        v: values ``[B, H_kv, L, d_v]``.
        block: positions per block.
        window_blocks: odd number of key blocks in the sliding window.
        global_blocks: leading blocks that attend and are attended by all.
        random_blocks: random key blocks per query block.
        seed: fixes the random blocks.
        **options: :class:`~attnkit.efficient._inputs.KindOptions` (``mask``, ``causal``,
            ``return_weights``, ...).

    Returns:
        :class:`~attnkit.AttentionOutput` with ``context [B, H, L, d_v]``.

    Example::

        >>> x = torch.randn(1, 2, 256, 16)
        >>> bigbird_attention(x, x, x, block=32).context.shape
        torch.Size([1, 2, 256, 16])
    """
    kind = BigBirdAttention(block, window_blocks, global_blocks, random_blocks, seed)
    return kind(q, k, v, **options)
