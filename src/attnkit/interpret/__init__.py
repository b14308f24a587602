"""Interpreting attention: recording maps, rollout, flow, gradient-weighted maps, head importance,
export and plots (survey §4.2.2, manual inspection of attention weights).

    >>> with attnkit.interpret.record(model) as rec:
    ...     model(x)
    >>> attnkit.interpret.attention_rollout(rec.maps())
"""

from attnkit.interpret.cross_attention import record_cross_attention
from attnkit.interpret.export import to_bertviz
from attnkit.interpret.flow import attention_flow
from attnkit.interpret.gradient import gradient_weighted_attention
from attnkit.interpret.head_importance import head_importance
from attnkit.interpret.plots import plot_alignment, plot_heads, plot_heatmap
from attnkit.interpret.record import AttentionRecorder, record
from attnkit.interpret.rollout import attention_rollout, fuse_heads, residual_attention
from attnkit.interpret.viewer import AttentionMap, render_viewer, write_viewer

__all__ = [
    "AttentionMap",
    "AttentionRecorder",
    "attention_flow",
    "attention_rollout",
    "fuse_heads",
    "gradient_weighted_attention",
    "head_importance",
    "plot_alignment",
    "plot_heads",
    "plot_heatmap",
    "record",
    "record_cross_attention",
    "render_viewer",
    "residual_attention",
    "to_bertviz",
    "write_viewer",
]
