"""Soft vs hard attention over a convolutional feature grid (Xu et al. 2015, "Show, Attend and Tell").

Xu et al. attend over ``L`` annotation vectors ``a_i`` — the feature vectors of the ``L``
locations of a CNN's last convolutional layer — with an attention model ``f_att``, an MLP that
scores each location from the decoder's state; here the task is one label per image, so there is
one attention step and its query is ``h = tanh(W_h · mean_i(a_i) + b_h)``, the way Xu et al.
initialise the LSTM's state from the mean annotation (§3.1.2).

    e_i = w^T tanh(W_q h + W_a a_i + b)                 f_att: attnkit's additive score
    α_i = exp(e_i) / Σ_k exp(e_k)                         (Xu eq. 5; survey eq. 25)

**Soft** (deterministic) attention, Xu §4.2: the context is the expectation of the annotation
under ``α``, ``ẑ = Σ_i α_i a_i``; trained end to end by back-propagating cross-entropy.

**Hard** (stochastic) attention, Xu §4.1: one location ``s ~ Multinoulli(α)``, ``ẑ = a_s``
(attnkit's ``Hard`` alignment, survey eq. 26). The one-hot weights carry no gradient, so the
scorer learns only from the REINFORCE estimate of Xu's eq. (12):

    loss = CE(y | a_s) − λ_r (log p(y | a_s) − b) log p(s | a) − λ_e H[α]

with ``b`` a moving average of the reward ``log p(y | a_s)`` (``Hard.reinforce_loss``, baseline
decay 0.9 as in Xu's eq. 11) and the entropy bonus ``H[α] = −Σ_i α_i log α_i`` (Xu's ``λ_e``).
Xu's trick of sometimes using the expectation ``α`` instead of a sample is not used.
*At evaluation* the hard model attends to the single most probable location
(``argmax_i α_i``, attnkit's ``Hard`` in eval mode) — our choice, so that test accuracy is
deterministic; it uses one location like a sample does, unlike the expectation.

Both go through ``attnkit.attention``, so ``attnkit.evaluate.ablate(model, "uniform")`` replaces
``α`` (soft) or the one-hot sample (hard) by ``1/L`` on every location: for both the context
becomes the plain mean ``(1/L) Σ_i a_i``.

The annotation grid: three 3 × 3 convolution blocks (ReLU) with 2 × 2 max-pooling after the first
two, so a 28 × 28 image gives ``L = 7 · 7 = 49`` annotation vectors of ``channels`` features,
each seeing an 18 × 18-pixel receptive field.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.core.align import Hard, masked_log_softmax
from attnkit.core.engine import attention
from attnkit.core.scores import Additive


class GlimpseClassifier(nn.Module):
    """Image classifier with soft or hard attention over CNN annotation vectors (Xu et al.).

    Args:
        channels: input channels ``C`` of the images.
        num_classes: outputs of the classifier.
        attention: ``"soft"`` (Xu §4.2) or ``"hard"`` (Xu §4.1, REINFORCE).
        features: size ``D`` of each annotation vector ``a_i`` (conv channels).
        hidden_dim: hidden size of the attention MLP ``f_att`` and of the output MLP.
        dropout: on the context before the output MLP.
        reinforce_weight: ``λ_r`` of the REINFORCE term (hard only).
        entropy_weight: ``λ_e`` of the entropy bonus (hard only).
        baseline_decay: of the moving-average reward baseline (hard only).

    Shapes: ``forward(images [B, C, h, w]) -> logits [B, num_classes]``;
    :meth:`attend` also returns the weights ``[B, L]`` over the ``L = (H/4)·(W/4)`` locations.

    Example::

        >>> model = GlimpseClassifier(1, 10, attention="hard")
        >>> model(torch.randn(2, 1, 28, 28)).shape
        torch.Size([2, 10])
    """

    def __init__(
        self,
        channels: int,
        num_classes: int,
        *,
        attention: Literal["soft", "hard"] = "soft",
        features: int = 32,
        hidden_dim: int = 64,
        dropout: float = 0.0,
        reinforce_weight: float = 1.0,
        entropy_weight: float = 0.01,
        baseline_decay: float = 0.9,
    ) -> None:
        super().__init__()
        if attention not in ("soft", "hard"):
            raise ValueError(f"attention must be 'soft' or 'hard', got {attention!r}")
        self.attention = attention
        self.reinforce_weight, self.entropy_weight = reinforce_weight, entropy_weight
        self.encoder = nn.Sequential(
            nn.Conv2d(channels, features, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(features, features, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(features, features, 3, padding=1),
            nn.ReLU(),
        )
        self.init_query = nn.Linear(features, hidden_dim)  # W_h, b_h: h from mean(a_i)
        self.score = Additive(hidden_dim, features, hidden_dim)  # f_att
        self.align = Hard(baseline_decay=baseline_decay) if attention == "hard" else "softmax"
        self.dropout = nn.Dropout(dropout)
        self.output = nn.Sequential(  # p(y | ẑ): Xu's deep output layer, without a word input
            nn.Linear(features, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, num_classes)
        )

    def annotations(self, images: Tensor) -> Tensor:
        """The annotation vectors ``a [B, L, D]`` (locations in row-major grid order)."""
        if images.dim() != 4:
            raise ValueError(f"images must be [B, C, h, w], got {tuple(images.shape)}")
        grid = self.encoder(images)  # [B, D, H/4, W/4]
        return grid.flatten(2).transpose(1, 2)  # [B, L, D]

    def query(self, a: Tensor) -> Tensor:
        """``h [B, 1, hidden]``: the attention query from the mean annotation."""
        return torch.tanh(self.init_query(a.mean(1, keepdim=True)))

    def attend(self, images: Tensor) -> tuple[Tensor, Tensor, Tensor | None, Tensor, Tensor]:
        """``(logits [B, K], weights [B, L], log_prob [B] or None, a [B, L, D], h [B, 1, d_h])``.

        ``weights`` are ``α`` (soft) or the one-hot location (hard); ``log_prob`` is
        ``log α_s`` of the sampled / chosen location (hard only).
        """
        a = self.annotations(images)
        h = self.query(a)
        out = attention(h, a, a, score=self.score, align=self.align, return_weights=True)
        context = out.context.squeeze(1)  # ẑ [B, D]
        assert out.weights is not None
        log_prob = None if out.log_prob is None else out.log_prob.reshape(len(a))
        logits = self.output(self.dropout(context))
        return logits, out.weights.reshape(len(a), -1), log_prob, a, h

    def forward(self, images: Tensor) -> Tensor:
        return self.attend(images)[0]

    def objective(self, inputs: dict[str, Tensor], labels: Tensor) -> Tensor:
        """Training loss: cross-entropy (soft); plus, for hard attention, the REINFORCE
        surrogate and the entropy bonus of Xu's eq. (12) (see the module docstring)."""
        logits, _, log_prob, a, h = self.attend(**inputs)
        nll = F.cross_entropy(logits, labels, reduction="none")  # −log p(y | ẑ) [B]
        loss = nll.mean()
        if self.attention == "soft":
            return loss
        assert isinstance(self.align, Hard) and log_prob is not None
        reward = -nll.detach()  # log p(y | a_s): the log-likelihood of the true class
        loss = loss + self.reinforce_weight * self.align.reinforce_loss(log_prob, reward)
        if self.entropy_weight:
            # H[α] from the same scores f_att gives the engine; computed beside the engine
            # because the Hard alignment returns only the sample's weights
            log_alpha = masked_log_softmax(self.score(h, a)).squeeze(1)  # [B, L]
            entropy = -(log_alpha.exp() * log_alpha).sum(-1).mean()
            loss = loss - self.entropy_weight * entropy
        return loss
