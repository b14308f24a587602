"""attnkit's interpretation and evaluation tools on Hugging Face models running on attnkit, each
against an independent computation on the eager twin (its own output_attentions, or its weights
edited so that eager computes what the tool claims)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel, BertConfig

import attnkit as ak
from attnkit.evaluate import ablate
from attnkit.integrations.huggingface import swap_attention
from attnkit.interpret import (
    attention_rollout,
    gradient_weighted_attention,
    head_importance,
    record,
    to_bertviz,
)

NAMES = [f"encoder.layer.{i}.attention.self" for i in (0, 1)]


@pytest.fixture
def bert(twins):
    config = BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=64,
    )  # fmt: skip
    eager, ours = twins(AutoModel, config)
    ids = torch.randint(3, 99, (2, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    return eager, ours, {"input_ids": ids, "attention_mask": mask}


def test_record_names_hf_modules_and_matches_eager_weights(bert) -> None:
    eager, ours, batch = bert
    with torch.no_grad():
        reference = eager(**batch, output_attentions=True).attentions
        with record(ours) as rec:
            ours(**batch)
    assert rec.keys() == NAMES
    for name, expected in zip(NAMES, reference, strict=True):
        assert (rec[name] - expected).abs().max() <= 1e-5
    rolled = attention_rollout(rec.maps())
    assert (rolled - attention_rollout(list(reference))).abs().max() <= 1e-5
    exported = to_bertviz(rec, batch_index=1, length=4)
    assert [tuple(w.shape) for w in exported] == [(1, 4, 4, 4)] * 2
    assert torch.equal(
        to_bertviz(reference, batch_index=1, length=4)[0], reference[0][1:2, :, :4, :4]
    )


def test_record_on_a_stock_model_says_how_to_switch(bert) -> None:
    eager, _, batch = bert
    with pytest.raises(ValueError, match='attn_implementation="attnkit"'):
        with record(eager):
            eager(**batch)
    with pytest.raises(ValueError, match="attn_implementation='eager'"):
        head_importance(eager, lambda: eager(**batch).last_hidden_state.sum())
    # an ablation that would replace nothing says so too, instead of reporting the model itself
    with pytest.raises(ValueError, match=r"no attention replaced: .*attn_implementation='eager'"):
        with ablate(eager, "uniform"):
            eager(**batch)


def test_head_importance_equals_zeroing_the_head_in_eager(bert) -> None:
    eager, ours, batch = bert

    def loss(model):
        return lambda: model(**batch).last_hidden_state.pow(2).mean()

    importance = head_importance(ours, loss(ours))
    assert list(importance) == NAMES and all(v.shape == (4,) for v in importance.values())
    with torch.no_grad():
        base = float(loss(eager)())
        dense = eager.encoder.layer[1].attention.output.dense
        saved = dense.weight.clone()
        dense.weight[:, 2 * 8 : 3 * 8] = 0  # head 2's context never reaches the output
        expected = float(loss(eager)()) - base
        dense.weight.copy_(saved)
    assert importance[NAMES[1]][2].item() == pytest.approx(expected, abs=1e-5)


def test_uniform_ablation_equals_zero_queries_in_eager(bert) -> None:
    eager, ours, batch = bert
    with torch.no_grad():
        with ablate(ours, "uniform"):
            ablated = ours(**batch).last_hidden_state
        for layer in eager.encoder.layer:  # q = 0: every admissible key scores alike
            layer.attention.self.query.weight.zero_()
            layer.attention.self.query.bias.zero_()
        expected = eager(**batch).last_hidden_state
    real = batch["attention_mask"].bool()[..., None]
    assert ((ablated - expected).abs().masked_fill(~real, 0)).max() <= 1e-4


def test_gradient_weighted_attention_on_hf(bert) -> None:
    _, ours, batch = bert
    maps = gradient_weighted_attention(
        ours, lambda: ours(**batch).last_hidden_state[:, 0], target=3
    )
    assert list(maps) == NAMES
    assert all(m.shape == (2, 4, 6, 6) and m.abs().sum() > 0 for m in maps.values())
    # padded keys get no weight, hence no weighted attention
    assert maps[NAMES[0]][1, ..., 4:].abs().max() == 0


def test_swap_attention_changes_the_model_only_inside_the_block(bert) -> None:
    eager, ours, batch = bert
    heads = torch.arange(4).view(1, 4, 1, 1)
    positions = torch.arange(6)
    distance = (positions[:, None] - positions[None, :]).abs()

    def alibi(score, b, h, q_idx, kv_idx):
        return score - 0.5 * (h + 1) * (q_idx - kv_idx).abs()

    with torch.no_grad():
        with swap_attention(ours, score_mod=alibi):
            swapped = ours(**batch).last_hidden_state
        with (
            swap_attention(ours, score="dot", scale=1e4, align="sparsemax", modules=NAMES[:1]),
            record(ours) as rec,
        ):
            ours(**batch)
        after = ours(**batch).last_hidden_state
        # reference: eager with the same bias in a 4-D float mask, next to the padding
        bias = -0.5 * (heads + 1) * distance
        padding = (1 - batch["attention_mask"][:, None, None, :].float()) * torch.finfo(
            torch.float32
        ).min
        expected = eager(
            input_ids=batch["input_ids"], attention_mask=bias + padding
        ).last_hidden_state
        plain = eager(**batch).last_hidden_state
    real = batch["attention_mask"].bool()[..., None]
    assert ((swapped - expected).abs().masked_fill(~real, 0)).max() <= 1e-4
    assert ((after - plain).abs().masked_fill(~real, 0)).max() <= 1e-4
    sparse, dense = rec[NAMES[0]], rec[NAMES[1]]
    assert (sparse == 0).sum() > (dense == 0).sum()  # sparsemax zeroes admissible keys too
    assert torch.allclose(sparse.sum(-1), torch.ones(2, 4, 6))
    with pytest.raises(ValueError, match="attn_implementation"):
        with swap_attention(eager, align="sparsemax"):
            pass


def test_hooks_see_calls_in_other_threads_only_there(bert) -> None:
    import threading

    _, ours, batch = bert
    seen = []
    with (
        torch.no_grad(),
        ak.attention_hooks(lambda c, m, run: seen.append(m) or run(c), model=ours),
    ):
        worker = threading.Thread(target=lambda: ours(**batch))
        worker.start()
        worker.join()
        assert seen == []
        ours(**batch)
    assert seen == NAMES
