"""Image classification on Fashion-MNIST: a Vision Transformer, and soft vs hard attention.

Data: :mod:`attnkit.data.images` — Fashion-MNIST from the Debian package
``dataset-fashion-mnist`` (MIT, Zalando SE 2017): 55,000 training images (cut to
``data.max_examples``), 5,000 validation images (a fixed seeded choice from the training file)
and the 10,000 test images, each labelled by Zalando with one of ten clothing classes. The pixels
are scaled to ``[0, 1]`` and standardised with the mean and standard deviation of the training
split's pixels (:meth:`FashionMNIST.fit`, saved with the run).

Models (``model.kind``):

* ``vit`` — :class:`attnkit.models.vit.VisionTransformer` (Dosovitskiy et al. 2021); the run's
  artifacts are attention-rollout maps (Abnar & Zuidema 2020) of the class token over the patch
  grid, drawn over eight test images.
* ``glimpse`` — :class:`attnkit.models.glimpse.GlimpseClassifier` (Xu et al. 2015) with
  ``attention: soft`` or ``hard``; the artifacts are the attention weights over its 7 × 7 grid of
  annotation vectors (``α`` for soft, the chosen location for hard) drawn over the same images.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pydantic import Field, model_validator
from torch import Tensor, nn

from attnkit.config import TASKS, ModelSection, check_attention_kind
from attnkit.data.images import FASHION_MNIST_CLASSES, Image, load_fashion_mnist
from attnkit.interpret import attention_rollout, record
from attnkit.models.glimpse import GlimpseClassifier
from attnkit.models.vit import VisionTransformer
from attnkit.tasks.base import Task

#: test images drawn by :meth:`FashionMNIST.artifacts`
ARTIFACT_IMAGES = 8


class ViTModelConfig(ModelSection):
    """Vision Transformer (Dosovitskiy et al. 2021): patches, a class token, encoder layers."""

    kind: Literal["vit"] = "vit"
    patch_size: int = Field(4, ge=1, description="P: divides the image's height and width")
    d_model: int = Field(64, ge=1)
    nhead: int = Field(4, ge=1)
    num_layers: int = Field(4, ge=1)
    dim_feedforward: int = Field(128, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    attention: str = Field(
        "exact", description="the encoder layers' self-attention: exact or an efficient kind"
    )

    def describe(self) -> str:
        # its attention key is the kind of attention: shown only when it is not the exact one
        name = super().describe().partition(" [")[0]
        return name if self.attention == "exact" else f"{name} [{self.attention} attention]"

    def architecture(self) -> dict[str, Any]:
        # exact attention is what every run had before the key existed: leaving the default out
        # keeps the fingerprints of those runs' checkpoints
        keys = super().architecture()
        if keys["attention"] == "exact":
            del keys["attention"]
        return keys

    @model_validator(mode="after")
    def _attention_kind(self) -> ViTModelConfig:
        check_attention_kind("attention", self.attention)
        return self

    @model_validator(mode="after")
    def _heads_divide(self) -> ViTModelConfig:
        if self.d_model % self.nhead:
            raise ValueError(
                f"nhead: the number of heads must divide d_model; got nhead={self.nhead}, "
                f"d_model={self.d_model}"
            )
        return self


class GlimpseModelConfig(ModelSection):
    """Soft vs hard attention over a convolutional feature grid (Xu et al. 2015)."""

    kind: Literal["glimpse"] = "glimpse"
    attention: Literal["soft", "hard"] = "soft"
    channels: int = Field(32, ge=1, description="size of each annotation vector a_i (conv)")
    hidden_dim: int = Field(64, ge=1, description="of the attention MLP and the output MLP")
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    reinforce_weight: float = Field(1.0, ge=0.0, description="hard: λ_r of Xu et al. eq. 12")
    entropy_weight: float = Field(
        0.01, ge=0.0, description="hard: λ_e, weight of the entropy bonus (Xu et al. §4.1)"
    )
    baseline_decay: float = Field(
        0.9, ge=0.0, lt=1.0, description="hard: of the moving-average reward baseline"
    )


@TASKS.register("fashion_mnist")
class FashionMNIST(Task):
    """Which of ten kinds of clothing is a 28 × 28 greyscale photo? (ViT or Xu et al.'s
    soft/hard attention.)"""

    classes: ClassVar[tuple[str, ...]] = FASHION_MNIST_CLASSES
    models = (ViTModelConfig, GlimpseModelConfig)
    image_size = (28, 28)

    def load(self) -> Mapping[str, Sequence[Any]]:
        return load_fashion_mnist(max_examples=self.config.data.max_examples)

    def label(self, example: Any) -> int:
        if not isinstance(example, Image):
            raise TypeError(f"an image example is an Image, got {type(example).__name__}")
        return example.label

    def fit(self, train: Sequence[Any]) -> dict[str, Any]:
        """The mean and standard deviation of the training pixels (scaled to ``[0, 1]``)."""
        if not train:
            raise ValueError("cannot fit the pixel statistics on an empty training split")
        pixels = np.stack([example.pixels for example in train]).astype(np.float64) / 255.0
        state = {"mean": float(pixels.mean()), "std": float(pixels.std())}
        self.restore(state)
        return state

    def restore(self, state: dict[str, Any]) -> None:
        if set(state) != {"mean", "std"} or not state["std"] > 0:
            raise ValueError(f"expected the state {{'mean', 'std' > 0}}, got {state}")
        self.mean, self.std = float(state["mean"]), float(state["std"])

    def collate(self, examples: Sequence[Any]) -> dict[str, Tensor]:
        """``{"images": [B, 1, 28, 28]}`` standardised pixels (float32)."""
        if not hasattr(self, "mean"):
            raise RuntimeError("call fit() or restore() before collate()")
        pixels = torch.from_numpy(np.stack([example.pixels for example in examples]))
        images = (pixels.to(torch.float32) / 255.0 - self.mean) / self.std
        return {"images": images.unsqueeze(1)}

    def build_model(self) -> nn.Module:
        section = self.model_config
        if isinstance(section, ViTModelConfig):
            return VisionTransformer(
                self.image_size,
                1,
                section.patch_size,
                len(self.classes),
                d_model=section.d_model,
                nhead=section.nhead,
                num_layers=section.num_layers,
                dim_feedforward=section.dim_feedforward,
                dropout=section.dropout,
                attention=section.attention,
            )
        if isinstance(section, GlimpseModelConfig):
            return GlimpseClassifier(
                1,
                len(self.classes),
                attention=section.attention,
                features=section.channels,
                hidden_dim=section.hidden_dim,
                dropout=section.dropout,
                reinforce_weight=section.reinforce_weight,
                entropy_weight=section.entropy_weight,
                baseline_decay=section.baseline_decay,
            )
        raise ValueError(
            f"model.kind: {self.config.data.corpus} takes vit or glimpse, got {section.kind!r}"
        )

    def describe(self, example: Any) -> str:
        height, width = example.pixels.shape
        return f"Fashion-MNIST image {example.source} ({height}×{width} greyscale)"

    def attention_maps(self, model: nn.Module, images: Tensor) -> Tensor:
        """``[B, gh, gw]``: where the model looks, on its grid of patches / locations.

        ViT: the class token's row of the attention rollout over all layers, without the class
        token's own column. Glimpse: the weights over the annotation grid (``α`` or one-hot).
        """
        with torch.no_grad():
            if isinstance(model, VisionTransformer):
                with record(model) as recorder:
                    model(images)
                rollout = attention_rollout(recorder.maps())  # [B, N + 1, N + 1]
                return rollout[:, 0, 1:].reshape(len(images), *model.grid)
            if isinstance(model, GlimpseClassifier):
                weights = model.attend(images)[1]  # [B, L]
                # the grid of a [B, C, h, w] image is (H // 4) × (W // 4): two 2 × 2 poolings
                return weights.reshape(len(images), images.shape[-2] // 4, images.shape[-1] // 4)
        raise TypeError(f"no attention map for a {type(model).__name__}")

    def artifacts(self, model: nn.Module, examples: Sequence[Any], directory: Path) -> list[Path]:
        """One PNG per test image (the first eight): the image, and its attention map upsampled
        over it, titled with the predicted and the true class."""
        chosen = list(examples[:ARTIFACT_IMAGES])
        if not chosen or (isinstance(model, VisionTransformer) and model.attention != "exact"):
            return []  # an efficient attention kind forms no weights: no rollout to draw
        was_training = model.training
        model.eval()
        try:
            images = self.collate(chosen)["images"]
            with torch.no_grad():
                predicted = model(images).argmax(-1).tolist()
            maps = self.attention_maps(model, images)
        finally:
            model.train(was_training)
        # bilinear upsampling of the grid to pixels, as in the ViT paper's attention figures
        overlays = F.interpolate(maps.unsqueeze(1).double(), size=self.image_size, mode="bilinear")
        directory.mkdir(parents=True, exist_ok=True)
        what = "attention rollout" if isinstance(model, VisionTransformer) else "attention"
        paths = []
        for i, (example, guess, overlay) in enumerate(
            zip(chosen, predicted, overlays, strict=True)
        ):
            title = (
                f"{example.source}: predicted {self.classes[guess]}, "
                f"true {self.classes[example.label]}"
            )
            figure = _overlay_figure(example.pixels, overlay[0].numpy(), title, what)
            path = directory / f"{what.replace(' ', '_')}_{i}.png"
            figure.savefig(path, dpi=100)
            paths.append(path)
        return paths


def _overlay_figure(pixels: np.ndarray, overlay: np.ndarray, title: str, what: str) -> Figure:
    """Two panels: the image, and the image under ``overlay`` (scaled to its min–max range)."""

    figure = Figure(figsize=(5.0, 2.8))
    FigureCanvasAgg(figure)  # draw off-screen without pyplot's global state
    left, right = figure.subplots(1, 2)
    left.imshow(pixels, cmap="gray", vmin=0, vmax=255)
    left.set_title("image", fontsize=9)
    right.imshow(pixels, cmap="gray", vmin=0, vmax=255)
    # scaled to its own range: rollout maps sit on a large uniform floor (the residual identity)
    low, high = overlay.min(), overlay.max()
    scaled = (overlay - low) / (high - low) if high > low else np.zeros_like(overlay)
    right.imshow(scaled, cmap="jet", alpha=0.5, vmin=0, vmax=1)
    right.set_title(what, fontsize=9)
    for ax in (left, right):
        ax.set_xticks([])
        ax.set_yticks([])
    figure.suptitle(title, fontsize=9)
    return figure
