"""Head importance by masking heads (Michel, Levy & Neubig 2019, "Are Sixteen Heads Really Better
than One?").

Each head ``h`` of a multi-head module gets a gate ``ξ_h`` on its context,
``MHAtt(x) = Σ_h ξ_h · Att_h(x)``; masking a head sets ``ξ_h = 0``. A head's importance is how much
the loss rises when it alone is masked, ``I_h = L(ξ_h = 0) - L``, evaluated on held-out data.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from attnkit.core.hooks import ModuleSelection
from attnkit.evaluate.ablation import ablate
from attnkit.interpret.record import record


def head_importance(
    model: nn.Module,
    loss: Callable[[], Tensor | float],
    *,
    modules: ModuleSelection = None,
) -> dict[str, Tensor]:
    """Loss increase when each head of each attention module is masked on its own.

    Args:
        model: the model (any module whose attention goes through attnkit's engine).
        loss: evaluates the model on fixed data and returns a scalar loss, e.g.
            ``lambda: F.cross_entropy(model(x), y)``; called ``1 + Σ heads`` times.
        modules: as in :func:`attnkit.interpret.record`.

    Returns:
        ``{module name: float64 [H]}``: ``I_h = loss(head h masked) - loss()``.

    Example::

        >>> layer = ak.layers.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval()
        >>> x = torch.randn(2, 5, 16)
        >>> scores = head_importance(layer, lambda: layer(x).pow(2).mean())
        >>> {name: tuple(s.shape) for name, s in scores.items()}
        {'self_attn': (2,)}
    """
    with torch.no_grad():
        with record(model, modules=modules, rows=slice(0, 1)) as rec:
            base = float(loss())
        heads = {name: rec[name].shape[1] for name in rec.keys()}
        importance = {}
        for name, n_heads in heads.items():
            scores = torch.zeros(n_heads, dtype=torch.float64)
            for h in range(n_heads):
                with ablate(model, "zero_head", modules=[name], heads=[h]):
                    scores[h] = float(loss()) - base
            importance[name] = scores
    return importance
