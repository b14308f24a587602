"""Attention over a sequence split across processes: ring attention over ``torch.distributed``.

- :func:`ring_attention` — exact softmax attention, keys/values passed around a ring of ranks
  (forward and backward), causal with zig-zag load balancing;
- :class:`ContextParallelEncoderLayer` — a Transformer layer whose sequence is sharded over ranks;
- :func:`shard_sequence`, :func:`unshard_sequence`, :func:`gather_sequence`,
  :func:`local_positions` — how positions are laid out over ranks;
- :func:`init_process_group` (with a timeout, the backend chosen by :func:`default_backend`),
  :class:`PeerFailureError`,
  :func:`all_reduce_gradients`, :func:`launch_local` (W local processes, per-rank results).

See docs/distributed.md.
"""

from attnkit.distributed.context_parallel import ContextParallelEncoderLayer
from attnkit.distributed.launch import RankResult, launch_local, rss_peak_bytes
from attnkit.distributed.layout import (
    gather_sequence,
    local_positions,
    padded_length,
    shard_sequence,
    unshard_sequence,
)
from attnkit.distributed.process_group import (
    PeerFailureError,
    all_reduce_gradients,
    default_backend,
    free_port,
    init_process_group,
)
from attnkit.distributed.ring_attention import ring_attention

__all__ = [
    "ContextParallelEncoderLayer",
    "PeerFailureError",
    "RankResult",
    "all_reduce_gradients",
    "default_backend",
    "free_port",
    "gather_sequence",
    "init_process_group",
    "launch_local",
    "local_positions",
    "padded_length",
    "ring_attention",
    "rss_peak_bytes",
    "shard_sequence",
    "unshard_sequence",
]
