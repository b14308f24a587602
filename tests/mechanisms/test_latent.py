"""Perceiver latent attention (Jaegle et al. 2021) against written-out equations and torch.

The cross-attention reference is the block written in float64 from plain tensors read off the
module: ``z + softmax(Q K^T / sqrt(d_h)) V W_O`` with ``Q = LN(z) W_Q^T``, ``K = LN(x) W_K^T``,
``V = LN(x) W_V^T`` over the real inputs, then ``z + MLP(LN(z))`` with a GELU MLP. The latent
self-attention layers are checked against ``torch.nn.TransformerEncoderLayer`` (pre-norm, GELU)
loaded with the same weights, and the whole encoder against the composition of the two.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import attnkit as ak
from attnkit.mechanisms.latent import LatentCrossAttention, PerceiverEncoder

F64 = torch.float64
TOL = 1e-10
MASK = torch.tensor([[True] * 9, [True] * 5 + [False] * 4])


def close(x: Tensor, y: Tensor, tol: float = TOL) -> None:
    torch.testing.assert_close(x, y, rtol=0, atol=tol)


def randn(*shape: int, seed: int = 0) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def layer_norm(x: Tensor, norm: torch.nn.LayerNorm) -> Tensor:
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def reference_cross(
    block: LatentCrossAttention, z: Tensor, x: Tensor, mask: Tensor | None
) -> Tensor:
    mha = block.attention
    d, h = mha.embed_dim, mha.num_heads
    dh = d // h
    b_q, b_k, b_v = mha.in_proj_bias.split(d)
    zn, xn = layer_norm(z, block.norm_latents), layer_norm(x, block.norm_inputs)
    q = zn @ mha.q_proj_weight.T + b_q
    k = xn @ mha.k_proj_weight.T + b_k
    v = xn @ mha.v_proj_weight.T + b_v
    out = torch.zeros_like(z)
    for b in range(z.shape[0]):
        real = [m for m in range(x.shape[1]) if mask is None or bool(mask[b, m])]
        heads = []
        for j in range(h):
            part = slice(j * dh, (j + 1) * dh)
            scores = q[b, :, part] @ k[b, real, part].T / math.sqrt(dh)  # [N, M_real]
            heads.append(torch.softmax(scores, -1) @ v[b, real, part])
        read = torch.cat(heads, -1) @ mha.out_proj.weight.T + mha.out_proj.bias
        zb = z[b] + read
        ff = block.feedforward
        hidden = F.gelu(layer_norm(zb, block.norm_feedforward) @ ff[0].weight.T + ff[0].bias)
        out[b] = zb + hidden @ ff[2].weight.T + ff[2].bias
    return out


def torch_layer(layer: torch.nn.Module) -> torch.nn.TransformerEncoderLayer:
    """torch's own pre-norm GELU encoder layer with ``layer``'s weights (same parameter names)."""
    attention = layer.self_attn
    ref = torch.nn.TransformerEncoderLayer(
        attention.embed_dim,
        attention.num_heads,
        layer.linear1.out_features,
        dropout=0.0,
        activation="gelu",
        batch_first=True,
        norm_first=True,
        dtype=F64,
    )
    ref.load_state_dict(layer.state_dict())
    return ref.eval()


def test_cross_attention_matches_equations_with_padding() -> None:
    torch.manual_seed(0)
    block = LatentCrossAttention(8, 3, num_heads=2, d_feedforward=12).double()
    z, x = randn(2, 4, 8, seed=1), randn(2, 9, 3, seed=2)
    close(block(z, x, MASK), reference_cross(block, z, x, MASK))


@pytest.mark.parametrize("share_weights", [True, False])
def test_encoder_is_cross_then_latent_layers_repeated(share_weights: bool) -> None:
    torch.manual_seed(1)
    enc = PerceiverEncoder(
        3, 8, 4, num_heads=2, num_latent_layers=2, num_blocks=3, share_weights=share_weights
    ).double()
    assert len(enc.blocks) == (2 if share_weights else 3)
    x = randn(2, 9, 3, seed=3)
    z = enc.latents.expand(2, -1, -1)
    for i in range(3):
        block = enc.blocks[min(i, len(enc.blocks) - 1)]
        z = reference_cross(block.cross, z, x, MASK)
        for layer in block.latent_layers:
            with torch.no_grad():
                z = torch_layer(layer)(z)
    close(enc(x, MASK), z)


def test_shared_weights_add_no_parameters() -> None:
    def count(module: torch.nn.Module) -> int:
        return sum(p.numel() for p in module.parameters())

    two = PerceiverEncoder(3, 8, 4, num_heads=2, num_blocks=2)
    assert count(PerceiverEncoder(3, 8, 4, num_heads=2, num_blocks=5)) == count(two)
    assert count(PerceiverEncoder(3, 8, 4, num_heads=2, num_blocks=3, share_weights=False)) > count(
        two
    )


def test_invariant_to_input_order_and_padding() -> None:
    """Without position features the latents do not depend on the input order; padded inputs
    (even huge ones) are never read, so a padded example gives what it gives alone."""
    torch.manual_seed(2)
    enc = PerceiverEncoder(3, 8, 4, num_heads=2, num_blocks=2).double()
    x = randn(2, 9, 3, seed=4)
    out = enc(x, MASK)
    g = torch.Generator().manual_seed(0)
    perm = torch.stack([torch.randperm(9, generator=g) for _ in range(2)])
    px = x.gather(1, perm.unsqueeze(-1).expand(-1, -1, 3))
    close(enc(px, MASK.gather(1, perm)), out)
    noisy = x.clone()
    noisy[1, 5:] = 1e6
    close(enc(noisy, MASK), out)
    close(enc(x[1:, :5])[0], out[1])


def test_no_attention_map_grows_quadratically_with_the_input() -> None:
    """Every attention map is [B, H, N, M] (cross) or [B, H, N, N] (latent): none is M × M."""
    enc = PerceiverEncoder(3, 8, 4, num_heads=2, num_blocks=2)
    with ak.interpret.record(enc) as rec:
        enc(torch.randn(1, 300, 3))
    shapes = {name: w.shape for name, ws in rec.weights.items() for w in ws}
    assert shapes["blocks.0.cross.attention"] == (1, 1, 4, 300)
    assert shapes["blocks.0.latent_layers.0.self_attn"] == (1, 2, 4, 4)
    assert all(300 not in s[-2:] or s[-2] == 4 for s in shapes.values())


def test_any_score_and_taxonomy() -> None:
    enc = PerceiverEncoder(3, 8, 4, num_heads=2, score="cosine")
    assert enc(torch.randn(2, 20, 3)).shape == (2, 4, 8)
    row = ak.taxonomy.describe(enc).names()
    assert row["scoring"] == {"Similarity"}
    assert row["query_type"] == {"Self-Attentive"}
    assert row["query_multiplicity"] == {"Multi-Head"}


def test_bad_input_names_expected_and_given() -> None:
    enc = PerceiverEncoder(3, 8, 4, num_heads=2)
    with pytest.raises(ValueError, match=r"\[B, n, d=3\], got shape \(2, 9, 4\)"):
        enc(torch.randn(2, 9, 4))
    with pytest.raises(ValueError, match=r"mask \[B, n\] = \(2, 9\), got \(2, 8\)"):
        enc(torch.randn(2, 9, 3), torch.ones(2, 8, dtype=torch.bool))
    with pytest.raises(ValueError, match="num_latents must be a positive int, got 0"):
        PerceiverEncoder(3, 8, 0)


def test_the_latent_layer_equals_torchs_pre_norm_encoder_layer() -> None:
    """The latent self-attention layer is a pre-LayerNorm GELU Transformer layer: torch's own,
    with the same parameter names (so its weights load as they are)."""
    from attnkit.mechanisms.latent import LatentSelfAttention

    torch.manual_seed(0)
    reference = torch.nn.TransformerEncoderLayer(
        8, 2, 12, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
    ).double()
    layer = LatentSelfAttention(8, 2, 12).double()
    layer.load_state_dict(reference.state_dict())
    z = torch.randn(3, 5, 8, dtype=torch.float64)
    torch.testing.assert_close(layer(z), reference(z))
