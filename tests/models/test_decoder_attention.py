"""DecoderAttention (keys' score features cached per sentence) against one ak.attention call."""

from __future__ import annotations

import pytest
import torch

import attnkit as ak
from attnkit.models.decoder_attention import (
    ALIGN_NAMES,
    SCORE_NAMES,
    DecoderAttention,
    build_decoder_align,
    build_decoder_score,
)


@pytest.mark.parametrize("align", ALIGN_NAMES)
@pytest.mark.parametrize("score", SCORE_NAMES)
def test_a_step_equals_ak_attention(score: str, align: str) -> None:
    torch.manual_seed(0)
    d = 6
    attention = DecoderAttention(
        build_decoder_score(score, d, d, max_source_length=9),
        build_decoder_align(align, d, window=2),
        d,
    ).double()
    query = torch.randn(3, 4, d, dtype=torch.float64)  # 4 consecutive target positions
    keys = torch.randn(3, 7, d, dtype=torch.float64)
    mask = torch.arange(7) < torch.tensor([[7], [3], [1]])
    context, weights = attention(query, attention.key_features(keys), keys, mask)
    ref = ak.attention(
        query,
        keys,
        keys,
        score=attention.score,
        align=attention.align,
        mask=mask[:, None, :],
        return_weights=True,
    )
    torch.testing.assert_close(weights, ref.weights)
    torch.testing.assert_close(context, ref.context)


def test_local_monotonic_centres_the_window_on_the_target_position() -> None:
    """p_t = t: at position 4 with D = 1 only source positions 3, 4, 5 get weight."""
    attention = DecoderAttention(
        build_decoder_score("dot", 4, 4, 9), build_decoder_align("local_monotonic", 4, 1), 4
    )
    keys = torch.randn(2, 8, 4)
    _, weights = attention(
        torch.randn(2, 1, 4), keys, keys, torch.ones(2, 8, dtype=torch.bool), position=4
    )
    assert torch.all(weights[..., [0, 1, 2, 6, 7]] == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 1))


def test_location_score_limit_and_unknown_names() -> None:
    attention = DecoderAttention(
        build_decoder_score("location", 4, 4, 5), build_decoder_align("global", 4, 1), 4
    )
    with pytest.raises(ValueError, match="max_length=5"):
        attention.key_features(torch.randn(1, 6, 4))
    with pytest.raises(ValueError, match="unknown score 'cosine'"):
        build_decoder_score("cosine", 4, 4, 5)
    with pytest.raises(ValueError, match="unknown align 'hard'"):
        build_decoder_align("hard", 4, 1)
