"""Interpreting attention: recording maps, rollout, flow, gradient-weighted maps, head importance,
export and plots (survey §4.2.2, manual inspection of attention weights); and beyond the weights,
each through the attention hook: norm-based maps (``value_norm``), value zeroing, ALTI,
activation patching (``patch``), and captum's input×gradient and Integrated Gradients.

    >>> with attnkit.interpret.record(model) as rec:
    ...     model(x)
    >>> attnkit.interpret.attention_rollout(rec.maps())
"""

from attnkit.interpret.alti import ALTI, alti
from attnkit.interpret.cross_attention import record_cross_attention
from attnkit.interpret.export import to_bertviz
from attnkit.interpret.flow import attention_flow
from attnkit.interpret.gradient import gradient_weighted_attention
from attnkit.interpret.head_importance import head_importance
from attnkit.interpret.input_attribution import input_x_gradient, integrated_gradients
from attnkit.interpret.patching import patch
from attnkit.interpret.plots import plot_alignment, plot_heads, plot_heatmap
from attnkit.interpret.record import AttentionRecorder, record
from attnkit.interpret.rollout import attention_rollout, fuse_heads, residual_attention
from attnkit.interpret.value_norm import value_norm
from attnkit.interpret.value_zeroing import value_zeroing
from attnkit.interpret.viewer import AttentionMap, render_viewer, write_viewer

__all__ = [
    "ALTI",
    "AttentionMap",
    "AttentionRecorder",
    "alti",
    "attention_flow",
    "attention_rollout",
    "fuse_heads",
    "gradient_weighted_attention",
    "head_importance",
    "input_x_gradient",
    "integrated_gradients",
    "patch",
    "plot_alignment",
    "plot_heads",
    "plot_heatmap",
    "record",
    "record_cross_attention",
    "render_viewer",
    "residual_attention",
    "to_bertviz",
    "value_norm",
    "value_zeroing",
    "write_viewer",
]
