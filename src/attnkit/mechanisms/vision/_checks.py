"""Input validation shared by the convolutional attention modules: ``[B, C, h, w]`` feature maps."""

from __future__ import annotations

from torch import Tensor


def check_feature_map(name: str, x: object, channels: int | None, min_size: int = 1) -> None:
    """Raise unless ``x`` is a floating ``[B, C, h, w]`` tensor with ``C = channels`` (if given)
    and ``h, w >= min_size``, naming what was expected and what was given."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} expects a tensor [B, C, h, w], got {type(x).__name__}")
    expected_c = "C" if channels is None else f"C={channels}"
    if x.dim() != 4 or (channels is not None and x.shape[1] != channels):
        raise ValueError(f"{name} expects x [B, {expected_c}, h, w], got {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{name} expects a floating-point feature map, got {x.dtype}")
    if x.shape[2] < min_size or x.shape[3] < min_size:
        raise ValueError(f"{name} expects h, w >= {min_size}, got h={x.shape[2]}, w={x.shape[3]}")


def check_positive(name: str, **values: int) -> None:
    """Raise unless every keyword value is an int >= 1."""
    for key, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}: {key} must be an int >= 1, got {value!r}")
