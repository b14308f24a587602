"""A Transformer encoder layer whose sequence is split over ranks (context parallelism).

Every rank holds the same parameters and its own positions ``x [B, m, E]`` of the sequence. All
of the layer is position-wise — the q/k/v and output projections, layer norms, feed-forward
block, dropout — and runs locally, except self-attention, which is :func:`ring_attention` over the
ranks. So activation memory per rank is that of ``n / W`` positions, and the layer computes
exactly what the wrapped single-process layer computes on the whole sequence:

    post-norm:  x = LN1(x + SA(x)),  x = LN2(x + FF(x))          (pre-norm likewise)
    SA(x) = concat_h ring_attention(x W_q^h, x W_k^h, x W_v^h) W_o  (eq. 38-40)

Parameter gradients on each rank cover only its positions: sum them over the ranks
(:func:`~attnkit.distributed.all_reduce_gradients`) before the optimiser step, with the loss
normalised by the global number of positions.
"""

from __future__ import annotations

import torch.distributed as dist
from torch import Tensor, nn

from attnkit.core.align import Softmax
from attnkit.distributed.layout import local_positions
from attnkit.distributed.process_group import rank_and_size
from attnkit.distributed.ring_attention import ring_attention
from attnkit.layers.attention import project_keys_values, project_queries
from attnkit.layers.transformer import TransformerEncoderLayer


class ContextParallelEncoderLayer(nn.Module):
    """Wraps an ``attnkit.layers.TransformerEncoderLayer`` (its parameters, unchanged, so a
    single-process checkpoint loads as is) and runs it on a sequence sharded over ``group``.

    Supported: exact multi-head attention with softmax and any score :func:`ring_attention`
    takes, grouped-query heads, rotary positions (each rank rotates by its global positions),
    pre- and post-norm. Not supported (ValueError): ALiBi / T5 position biases, add_bias_kv /
    add_zero_attn, attention dropout in training, other attention kinds.

    Args:
        layer: the layer to run (any ``batch_first``; inputs follow it).
        group: the ranks the sequence is split over (``None``: the default group).
        layout: how the sequence was sharded (``"zigzag"`` or ``"contiguous"``).

    Shapes: ``x [B, m, E]`` (``[m, B, E]`` unless ``layer.batch_first``), ``m`` local positions.

    Example::

        >>> def work(rank, world_size):  # on each rank
        ...     torch.manual_seed(0)  # the same parameters and input everywhere
        ...     layer = ak.layers.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        ...     cp = ContextParallelEncoderLayer(layer)
        ...     x = torch.randn(1, 8, 16)
        ...     shard = ak.distributed.shard_sequence(x, rank=rank, world_size=world_size, dim=1)
        ...     return list(cp(shard, is_causal=True, length=8).shape)
        >>> [result.value for result in ak.distributed.launch_local(work, 2)]
        [[1, 4, 16], [1, 4, 16]]
    """

    def __init__(
        self,
        layer: TransformerEncoderLayer,
        *,
        group: dist.ProcessGroup | None = None,
        layout: str = "zigzag",
    ) -> None:
        super().__init__()
        if not isinstance(layer, TransformerEncoderLayer):
            raise TypeError(
                "layer must be an attnkit.layers.TransformerEncoderLayer, got "
                f"{type(layer).__name__}"
            )
        mha = layer.self_attn
        problems = []
        if mha.attention != "exact":
            problems.append(f"attention kind {mha.attention!r} (ring attention is exact)")
        if not isinstance(mha.align, Softmax):
            problems.append(f"align {mha.align.registry_name!r} (the lse merge needs softmax)")
        if mha.bias_k is not None or mha.add_zero_attn:
            problems.append("add_bias_kv / add_zero_attn (their keys have no position)")
        if layer.position_bias is not None:
            problems.append("a position_bias (score_mod of positions)")
        if problems:
            raise ValueError("ContextParallelEncoderLayer cannot run: " + "; ".join(problems))
        self.layer, self.group, self.layout = layer, group, layout

    def _self_attention(self, x: Tensor, is_causal: bool, length: int | None) -> Tensor:
        mha = self.layer.self_attn
        if mha.training and mha.dropout > 0:
            raise ValueError(
                f"attention dropout ({mha.dropout}) is not supported by ring attention; set the "
                "attention module's dropout to 0 (dropout after attention still works)"
            )
        q = project_queries(mha, x)  # [B, H, m, D]
        k, v = project_keys_values(mha, x, x)  # [B, G, m, D], [B, G, m, Dv]
        if self.layer.rotary is not None:
            rank, world = rank_and_size(self.group)
            positions = local_positions(rank, world, x.shape[1], self.layout, x.device)
            positions = positions.expand(x.shape[0], -1)  # [B, m]
            q, k = self.layer.rotary(q, positions), self.layer.rotary(k, positions)
        context = ring_attention(
            q, k, v, self.group, is_causal, score=mha.score, length=length, layout=self.layout
        ).context  # [B, H, m, Dv]
        return mha.out_proj(context.transpose(1, 2).flatten(2))  # [B, m, E]

    def forward(self, x: Tensor, *, is_causal: bool = False, length: int | None = None) -> Tensor:
        """This rank's output positions, like ``x``. ``length``: the real sequence length when
        the shards are padded (see :func:`~attnkit.distributed.ring_attention`).

        Args:
            x: this rank's shard ``[B, m, E]`` (``[m, B, E]`` unless ``layer.batch_first``).
            is_causal: causal self-attention over the whole sequence.
            length: the real sequence length (``None``: ``W · m``, no padding).

        Returns:
            The layer's output at this rank's positions, like ``x``.
        """
        layer = self.layer
        if x.dim() != 3:
            raise ValueError(f"x must be 3-D (batched), got shape {tuple(x.shape)}")
        x = layer._batch_first(x)
        if layer.norm_first:
            x = x + layer.dropout1(self._self_attention(layer.norm1(x), is_causal, length))
            x = x + layer._ff_block(layer.norm2(x))  # torch's block: its dropout2 included
        else:
            x = layer.norm1(x + layer.dropout1(self._self_attention(x, is_causal, length)))
            x = layer.norm2(x + layer._ff_block(x))
        return layer._batch_first(x)
