"""Vision Transformer: patches against a hand loop, the whole forward pass and its rollout against
torch's own pre-norm encoder layers in float64, a symmetry of the class token, and the task's
rollout PNGs."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnkit.config import validate
from attnkit.data.images import Image
from attnkit.evaluate import ablate
from attnkit.models.vit import VisionTransformer, patchify
from attnkit.tasks.images import FashionMNIST


def small_vit(**kwargs) -> VisionTransformer:
    torch.manual_seed(0)
    options = dict(d_model=16, nhead=4, num_layers=2, dim_feedforward=24)
    options.update(kwargs)
    return VisionTransformer((12, 8), 2, 4, 5, **options)


def test_patchify_matches_a_hand_loop():
    images = torch.randn(3, 2, 12, 8)
    patches = patchify(images, 4)
    assert patches.shape == (3, 6, 32)
    i = 0
    for r in range(3):  # row-major over the 3 × 2 grid
        for c in range(2):
            block = images[:, :, 4 * r : 4 * r + 4, 4 * c : 4 * c + 4]  # [B, C, P, P]
            expected = block.permute(0, 2, 3, 1).reshape(3, -1)  # pixels row by row, C last
            assert torch.equal(patches[:, i], expected)
            i += 1


def test_patch_size_must_divide_the_image():
    with pytest.raises(ValueError, match="must divide"):
        patchify(torch.randn(1, 1, 10, 8), 4)
    with pytest.raises(ValueError, match="must divide"):
        VisionTransformer((10, 8), 1, 4, 3)
    with pytest.raises(ValueError, match=r"\[B, 2, 12, 8\]"):
        small_vit()(torch.randn(1, 1, 12, 8))


def reference_vit(vit: VisionTransformer, images: torch.Tensor):
    """ViT eq. (1)-(4) in float64 with torch's own ``nn.TransformerEncoderLayer`` (pre-norm, GELU)
    loaded with the model's weights, and the rollout (Abnar & Zuidema) of its attention."""
    images = images.double()
    b, p = len(images), vit.patch_size
    patches = patchify(images, p)
    z = torch.cat(
        [vit.class_token.double().expand(b, -1, -1), F.linear(
            patches, vit.patch_embedding.weight.double(), vit.patch_embedding.bias.double()
        )], 1,
    ) + vit.position_embedding.double()  # fmt: skip
    n = z.shape[1]
    rollout = torch.eye(n, dtype=torch.float64).expand(b, n, n)
    for layer in vit.layers:
        d = z.shape[-1]
        torch_layer = nn.TransformerEncoderLayer(
            d, layer.self_attn.num_heads, layer.linear1.out_features, 0.0, activation="gelu",
            batch_first=True, norm_first=True, dtype=torch.float64,
        )  # fmt: skip
        torch_layer.load_state_dict({k: v.double() for k, v in layer.state_dict().items()})
        torch_layer.eval()
        normed = torch_layer.norm1(z)
        _, weights = torch_layer.self_attn(
            normed, normed, normed, need_weights=True, average_attn_weights=True
        )
        augmented = 0.5 * weights + 0.5 * torch.eye(n, dtype=torch.float64)
        rollout = (augmented / augmented.sum(-1, keepdim=True)) @ rollout
        z = torch_layer(z)
    y = F.layer_norm(z[:, 0], (z.shape[-1],), vit.norm.weight.double(), vit.norm.bias.double())
    return F.linear(y, vit.head.weight.double(), vit.head.bias.double()), rollout


def test_forward_and_rollout_match_torch_pre_norm_layers_in_float64():
    vit = small_vit().double().eval()
    images = torch.randn(3, 2, 12, 8, dtype=torch.float64)
    expected_logits, expected_rollout = reference_vit(vit, images)
    assert vit(images).shape == (3, 5)
    torch.testing.assert_close(vit(images), expected_logits, rtol=1e-10, atol=1e-10)
    task = image_task()
    maps = task.attention_maps(vit, images)  # the class token's row, without its own column
    assert maps.shape == (3, 3, 2)
    torch.testing.assert_close(
        maps, expected_rollout[:, 0, 1:].reshape(3, 3, 2), rtol=1e-10, atol=1e-10
    )


def permute_patches(images: torch.Tensor, order: list[int], p: int, grid: tuple[int, int]):
    """The image whose patch ``i`` is patch ``order[i]`` of ``images`` (blocks moved by hand)."""
    out = torch.empty_like(images)
    for i, j in enumerate(order):
        (ri, ci), (rj, cj) = divmod(i, grid[1]), divmod(j, grid[1])
        out[:, :, p * ri : p * ri + p, p * ci : p * ci + p] = images[
            :, :, p * rj : p * rj + p, p * cj : p * cj + p
        ]
    return out


def test_class_token_is_blind_to_patch_order_only_without_positions():
    # self-attention is permutation-equivariant over its tokens and the class token is not
    # moved, so without position embeddings the class token's output cannot depend on where
    # each patch is; the learned positions are what make it depend.
    vit = small_vit().double().eval()
    images = torch.randn(2, 2, 12, 8, dtype=torch.float64)
    shuffled = permute_patches(images, [4, 2, 5, 0, 1, 3], 4, (3, 2))
    with torch.no_grad():
        assert not torch.allclose(vit(images), vit(shuffled), atol=1e-6)
        vit.position_embedding.zero_()
        torch.testing.assert_close(vit(images), vit(shuffled), rtol=1e-10, atol=1e-10)


def test_uniform_ablation_changes_the_logits():
    vit = small_vit().eval()
    images = torch.randn(4, 2, 12, 8)
    with torch.no_grad():
        before = vit(images)
        with ablate(vit, mode="uniform"):
            after = vit(images)
    assert (before - after).abs().max() > 1e-3


def image_task(kind: str = "vit") -> FashionMNIST:
    model = {"kind": "vit", "patch_size": 4, "d_model": 16, "nhead": 4, "num_layers": 2,
             "dim_feedforward": 24} if kind == "vit" else {"kind": "glimpse", "channels": 8,
             "hidden_dim": 8}  # fmt: skip
    config = validate(
        {"name": "t", "data": {"corpus": "fashion_mnist"}, "model": model, "train": {"steps": 1}}
    )
    task = FashionMNIST(config)
    task.restore({"mean": 0.25, "std": 0.5})
    return task


@pytest.mark.parametrize("kind", ["vit", "glimpse"])
def test_task_writes_one_attention_png_per_test_image(tmp_path, kind):
    task = image_task(kind)
    torch.manual_seed(0)
    model = task.build_model()
    rng = np.random.default_rng(0)
    examples = [
        Image(rng.integers(0, 256, (28, 28), dtype=np.uint8), i % 10, f"test/{i}")
        for i in range(10)
    ]
    inputs = task.collate(examples[:2])["images"]
    assert inputs.shape == (2, 1, 28, 28)
    torch.testing.assert_close(
        inputs[1, 0].double(), (torch.from_numpy(examples[1].pixels) / 255.0 - 0.25).double() / 0.5
    )
    paths = task.artifacts(model, examples, tmp_path)
    assert len(paths) == 8 and all(p.parent == tmp_path for p in paths)
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 2000
    assert model.training  # artifacts() restores the mode it found


def test_fit_standardises_with_the_training_pixels():
    task = image_task()
    examples = [Image(np.full((28, 28), v, dtype=np.uint8), 0, "x") for v in (0, 51, 255)]
    state = task.fit(examples)
    values = np.array([0, 51, 255]) / 255.0
    assert state["mean"] == pytest.approx(values.mean()) and state["std"] == pytest.approx(
        values.std()
    )
    with pytest.raises(ValueError, match="mean"):
        task.restore({"mean": 0.1})


def _vit_task(attention: str) -> FashionMNIST:
    config = validate(
        {
            "name": "t",
            "data": {"corpus": "fashion_mnist"},
            "model": {"kind": "vit", "patch_size": 7, "d_model": 16, "nhead": 4,
                      "num_layers": 2, "dim_feedforward": 24, "attention": attention},
            "train": {"steps": 1},
        }
    )  # fmt: skip
    task = FashionMNIST(config)
    task.restore({"mean": 0.25, "std": 0.5})
    return task


def test_attention_kind_from_the_config_runs_in_every_layer():
    """model.attention reaches every self-attention: sliding_window with a window (256) wider
    than the 17 tokens admits every key, so it equals exact attention with the same weights;
    linear attention (elu+1 features) does not."""
    torch.manual_seed(0)
    exact = _vit_task("exact").build_model().eval()
    images = torch.randn(3, 1, 28, 28)
    expected = exact(images)
    for kind, equal in (("sliding_window", True), ("linear", False)):
        model = _vit_task(kind).build_model().eval()
        assert [layer.self_attn.attention for layer in model.layers] == [kind, kind]
        model.load_state_dict(exact.state_dict())  # parameter-free kinds: the same tensors
        got = model(images)
        if equal:
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        else:
            assert (got - expected).abs().max() > 1e-3


def test_an_efficient_kind_has_no_weight_dropout_and_no_rollout(tmp_path):
    """Efficient kinds refuse attention-weight dropout (they form no weights): the model builds
    them without it, and trains with its other dropout; its run draws no rollout."""
    torch.manual_seed(0)
    model = VisionTransformer((28, 28), 1, 7, 10, d_model=16, nhead=4, num_layers=1,
                              dropout=0.2, attention="performer")  # fmt: skip
    assert model.layers[0].self_attn.dropout == 0.0 and model.layers[0].dropout1.p == 0.2
    model(torch.randn(2, 1, 28, 28)).sum().backward()  # training mode: no refusal
    task = _vit_task("performer")
    examples = [Image(np.zeros((28, 28), dtype=np.uint8), 0, "x")]
    assert task.artifacts(task.build_model(), examples, tmp_path) == []


def test_uniform_ablation_replaces_an_efficient_kind():
    """With an efficient kind the uniform-attention column still replaces the attention: each
    query's context is the mean of the values (reference: the formula on the projections)."""
    from attnkit.layers.attention import exact_kinds

    torch.manual_seed(0)
    model = VisionTransformer((28, 28), 1, 7, 10, d_model=16, nhead=4, num_layers=1,
                              attention="linear").eval()  # fmt: skip
    images = torch.randn(2, 1, 28, 28)
    before = model(images)
    layer = model.layers[0]
    z = model.tokens(images)
    v = F.linear(
        layer.norm1(z), layer.self_attn.in_proj_weight[32:], layer.self_attn.in_proj_bias[32:]
    )
    z = z + layer.self_attn.out_proj(v.mean(1, keepdim=True).expand_as(v))  # uniform: mean
    z = z + layer._ff_block(layer.norm2(z))
    expected = model.head(model.norm(z[:, 0]))
    with pytest.raises(ValueError, match="efficient attention kind 'linear'"):
        with ablate(model, "uniform"):  # alone it has no weights to replace: refused, not skipped
            model(images)
    with exact_kinds(model) as names, ablate(model, "uniform"):
        torch.testing.assert_close(model(images), expected, atol=1e-5, rtol=1e-5)
    assert names == ["layers.0.self_attn"]
    torch.testing.assert_close(model(images), before)  # the kind is back after the block
    assert model.layers[0].self_attn._attend is not None
