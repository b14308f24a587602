"""LCR-Rot-hop (attnkit.models.lcr_rot_hop).

References: the output layer written out in float64 on the rotation's ``r``; under uniform
ablation ``r`` is ``[mean left; mean right; mean target; mean target]`` of the real encoder
features at every hop (eq. 20 with uniform weights), computed here by hand.
"""

from __future__ import annotations

import pytest
import torch

from attnkit.data.vocabulary import PAD
from attnkit.evaluate import ablate
from attnkit.models.lcr_rot_hop import LCRRotHop


def model_and_batch(dtype=torch.float32, hops: int = 3):
    torch.manual_seed(0)
    model = LCRRotHop(25, 2, embed_dim=6, hidden_dim=4, hops=hops).to(dtype)
    model.eval()
    left = torch.randint(1, 25, (4, 5))
    target = torch.randint(1, 25, (4, 3))
    right = torch.randint(1, 25, (4, 6))
    left[1, 2:] = PAD
    left[2] = PAD  # a target at the start of its context: no left context
    target[0, 1:] = PAD
    right[3] = PAD  # a target at the end: no right context
    right[0, 4:] = PAD
    return model, left, target, right


def lengths(row: torch.Tensor) -> int:
    return int((row != PAD).sum())


def test_shape_empty_contexts_and_padding_invariance() -> None:
    model, left, target, right = model_and_batch()
    logits = model(left, target, right)
    assert logits.shape == (4, 2) and torch.isfinite(logits).all()
    pad = torch.zeros(4, 2, dtype=torch.long)
    padded = model(
        torch.cat([left, pad], 1), torch.cat([target, pad], 1), torch.cat([right, pad], 1)
    )
    torch.testing.assert_close(padded, logits, atol=1e-6, rtol=1e-6)
    for b in range(4):
        alone = model(
            left[b : b + 1, : lengths(left[b])],
            target[b : b + 1, : lengths(target[b])],
            right[b : b + 1, : lengths(right[b])],
        )
        torch.testing.assert_close(alone, logits[b : b + 1], atol=1e-5, rtol=1e-5)


def test_output_layer_matches_float64_formula() -> None:
    model, left, target, right = model_and_batch(torch.float64)
    with torch.no_grad():
        out = model.attend(left, target, right)
        assert len(out.hops) == 3 and out.context.shape == (4, 32)
        expected = out.context @ model.classifier.weight.T + model.classifier.bias
        torch.testing.assert_close(model(left, target, right), expected, atol=1e-12, rtol=1e-12)


def test_uniform_ablation_gives_mean_representations() -> None:
    model, left, target, right = model_and_batch(torch.float64)
    with torch.no_grad():
        logits = model(left, target, right)
        with ablate(model, mode="uniform"):
            ablated = model(left, target, right)
        assert (ablated - logits).abs().max() > 1e-4
        means = {}
        for part, tokens in (("left", left), ("target", target), ("right", right)):
            mask = tokens != PAD
            features = model.encoders[part](model.embedding(tokens), mask)
            count = mask.sum(1, keepdim=True).clamp(min=1)  # an empty context's r is 0
            means[part] = (features * mask.unsqueeze(-1)).sum(1) / count
        r = torch.cat([means["left"], means["right"], means["target"], means["target"]], -1)
        expected = r @ model.classifier.weight.T + model.classifier.bias
        torch.testing.assert_close(ablated, expected, atol=1e-12, rtol=1e-12)


def test_bad_input() -> None:
    model, left, target, right = model_and_batch()
    with pytest.raises(ValueError, match="target must be int64"):
        model(left, target.float(), right)
    with pytest.raises(ValueError, match="one batch size"):
        model(left, target, right[:2])
    with pytest.raises(ValueError, match="hops"):
        LCRRotHop(10, 2, hops=0)


def test_task_collates_the_three_parts_for_the_model() -> None:
    from attnkit.config import validate
    from attnkit.tasks.base import task_for

    raw = {
        "name": "lcr-test",
        "data": {"corpus": "target_sentiment", "max_length": 10, "max_examples": 40},
        "model": {"kind": "lcr_rot_hop", "embed_dim": 6, "hidden_dim": 4, "hops": 2},
        "train": {"steps": 1},
    }
    task = task_for(validate(raw))
    data = task.load()
    state = task.fit(data["train"])
    examples = data["train"][:5]
    inputs = task.collate(examples)
    for part in ("left", "target", "right"):
        ids = inputs[part]
        assert ids.shape[0] == 5 and ids.shape[1] == max(
            1, *(len(getattr(e, part)) for e in examples)
        )
        for row, example in zip(ids.tolist(), examples, strict=True):
            words = task.words.decode([i for i in row if i != PAD])
            assert words == list(getattr(example, part))  # every training word is in the vocabulary
    assert [task.label(e) for e in examples] == [1, 0, 1, 0, 1]
    again = task_for(validate(raw))
    again.restore(state)
    assert again.words == task.words
    assert again.build_model()(**inputs).shape == (5, 2)
    with pytest.raises(TypeError, match="TargetExample"):
        task.label(("not", "an", "example"))


def test_pretrained_embeddings_are_the_initial_table_and_are_trained() -> None:
    torch.manual_seed(0)
    vectors = torch.randn(25, 6)
    model = LCRRotHop(25, 3, embed_dim=6, hidden_dim=4, hops=1, embeddings=vectors)
    weight = model.embedding.weight
    assert torch.equal(weight[1:], vectors[1:]) and torch.equal(weight[PAD], torch.zeros(6))
    assert weight.requires_grad  # fine-tuned with the rest of the model
    ids = torch.tensor([[3, 4]])
    model(ids, ids, ids).sum().backward()
    assert weight.grad[3].abs().sum() > 0 and weight.grad[PAD].abs().sum() == 0
    with pytest.raises(ValueError, match=r"\[vocab_size, embed_dim\] = \[25, 6\], got \[25, 5\]"):
        LCRRotHop(25, 3, embed_dim=6, embeddings=torch.zeros(25, 5))
    with pytest.raises(ValueError, match="floating-point tensor"):
        LCRRotHop(25, 3, embed_dim=6, embeddings=torch.zeros(25, 6, dtype=torch.long))


def test_one_hop_is_lcr_rot_written_out_in_float64() -> None:
    """``hops=1`` is Zheng & Xia's LCR-Rot: eq. (17)-(20) with f(h, q) = tanh(h^T W q + b)."""
    model, left, target, right = model_and_batch(torch.float64, hops=1)
    rotation = model.rotatory.rotations[0]

    def attend(part: str, query: torch.Tensor, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        w, b = rotation.scores[part].query_proj.weight, rotation.scores[part].bias
        e = torch.tanh(torch.einsum("bnd,de,be->bn", h, w, query) + b)
        e = e.masked_fill(~mask, float("-inf"))
        a = torch.softmax(e, -1).nan_to_num(0.0)  # an empty context: zero weights
        return (a.unsqueeze(-1) * h).sum(1)

    with torch.no_grad():
        for part, b in zip(("l", "r", "lt", "rt"), (0.3, -0.2, 0.5, 0.1), strict=True):
            rotation.scores[part].bias.fill_(b)  # non-zero b: it sits inside tanh
        h, m = {}, {}
        for part, tokens in (("left", left), ("target", target), ("right", right)):
            m[part] = tokens != PAD
            h[part] = model.encoders[part](model.embedding(tokens), m[part])
        r_t = (h["target"] * m["target"].unsqueeze(-1)).sum(1) / m["target"].sum(1, keepdim=True)
        r_l = attend("l", r_t, h["left"], m["left"])
        r_r = attend("r", r_t, h["right"], m["right"])
        r_lt = attend("lt", r_l, h["target"], m["target"])
        r_rt = attend("rt", r_r, h["target"], m["target"])
        r = torch.cat([r_l, r_r, r_lt, r_rt], -1)
        expected = r @ model.classifier.weight.T + model.classifier.bias
        torch.testing.assert_close(model(left, target, right), expected, atol=1e-12, rtol=1e-12)


def test_three_hops_are_lcr_rot_hop_written_out_in_float64() -> None:
    """Wallaart & Frasincar's LCR-Rot-hop: hop 1 is eq. (17)-(20); at every later hop the left
    and right contexts are attended with the previous hop's r^lt and r^rt, then the target with
    the new r^l and r^r; each hop has its own W and b; the classifier reads the last hop's r."""
    model, left, target, right = model_and_batch(torch.float64, hops=3)

    def attend(rotation, part, query, h, mask):
        w, b = rotation.scores[part].query_proj.weight, rotation.scores[part].bias
        e = torch.tanh(torch.einsum("bnd,de,be->bn", h, w, query) + b)
        a = torch.softmax(e.masked_fill(~mask, float("-inf")), -1).nan_to_num(0.0)
        return (a.unsqueeze(-1) * h).sum(1)

    with torch.no_grad():
        for hop, rotation in enumerate(model.rotatory.rotations):
            for i, part in enumerate(("l", "r", "lt", "rt")):
                rotation.scores[part].bias.fill_(0.1 * (hop + 1) - 0.15 * i)
        h, m = {}, {}
        for part, tokens in (("left", left), ("target", target), ("right", right)):
            m[part] = tokens != PAD
            h[part] = model.encoders[part](model.embedding(tokens), m[part])
        pooled = (h["target"] * m["target"].unsqueeze(-1)).sum(1) / m["target"].sum(1, keepdim=True)
        query_l = query_r = pooled
        for rotation in model.rotatory.rotations:
            r_l = attend(rotation, "l", query_l, h["left"], m["left"])
            r_r = attend(rotation, "r", query_r, h["right"], m["right"])
            query_l = attend(rotation, "lt", r_l, h["target"], m["target"])
            query_r = attend(rotation, "rt", r_r, h["target"], m["target"])
        r = torch.cat([r_l, r_r, query_l, query_r], -1)
        expected = r @ model.classifier.weight.T + model.classifier.bias
        torch.testing.assert_close(model(left, target, right), expected, atol=1e-12, rtol=1e-12)


def test_every_attention_runs_through_the_engine_and_is_recorded() -> None:
    from attnkit.interpret import record

    model, left, target, right = model_and_batch(hops=2)
    with torch.no_grad(), record(model) as recorded:
        logits = model(left, target, right)
        out = model.attend(left, target, right, return_weights=True)
    assert list(recorded.keys()) == ["rotatory.rotations.0", "rotatory.rotations.1"]
    over = {"l": left, "r": right, "lt": target, "rt": target}
    for hop, name in enumerate(recorded.keys()):
        calls = recorded.weights[name]
        assert len(calls) == 2 * 4  # model(...) then attend(...): l, r, lt, rt each time
        for part, weights in zip(("l", "r", "lt", "rt"), calls[4:], strict=True):
            real = over[part] != PAD  # [B, N]
            assert weights.shape == (4, 1, 1, real.shape[1])
            weights = weights[:, 0, 0]
            torch.testing.assert_close(weights, out.hops[hop].weights[part])
            assert torch.all(weights[~real] == 0)
            totals, has_words = weights.sum(-1), real.any(-1)
            torch.testing.assert_close(totals[has_words], torch.ones(int(has_words.sum())))
            assert torch.all(totals[~has_words] == 0)  # an empty context attends nothing
    assert torch.isfinite(logits).all()
