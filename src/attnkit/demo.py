"""``attnkit demo``: a short, real showcase of the general attention core.

The seeds' running example: "I love you" → "je t' aime", whose alignment puts je on I, t' on you and
aime on love. Each target word's query is a noisy view of the source word it translates; four
attention modules (Bahdanau's additive score, Luong's general score, Vaswani's scaled dot product,
and the scaled dot product with sparsemax alignment) attend from the French words to the English
ones. The two parametric scores are first fitted for a few hundred Adam steps to put their weight
on the aligned word (supervised attention) over fresh noisy queries; then every weight matrix is
printed side by side, with a check that each row sums to one.
"""

from __future__ import annotations

import torch

from attnkit.core.align import Sparsemax
from attnkit.core.engine import attention
from attnkit.core.scores import Additive, General, ScaledDot, Score

SOURCE = ["I", "love", "you"]
TARGET = ["je", "t'", "aime"]
GOLD = [0, 2, 1]  # je→I, t'→you, aime→love
DIM = 16


def _queries(keys: torch.Tensor, noise: float, generator: torch.Generator) -> torch.Tensor:
    """Queries of the French words: the aligned English key plus Gaussian noise. ``[M, d]``"""
    return keys[GOLD] + noise * torch.randn(len(GOLD), DIM, generator=generator)


def _fit(score: Score, keys: torch.Tensor, generator: torch.Generator, steps: int) -> float:
    """Fit a parametric score so attention lands on the gold alignment; returns the final loss."""
    optimizer = torch.optim.Adam(score.parameters(), lr=0.01)
    gold = torch.tensor(GOLD)
    loss = torch.tensor(0.0)
    for _ in range(steps):
        q = _queries(keys, 0.5, generator)
        weights = attention(
            q[None], keys[None], keys[None], score=score, return_weights=True
        ).weights
        loss = torch.nn.functional.nll_loss(weights[0].clamp_min(1e-9).log(), gold)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return float(loss.detach())


def _matrix_lines(title: str, weights: torch.Tensor) -> list[str]:
    lines = [
        f"{title:<26}",
        "      " + "".join(f"{w:>6}" for w in SOURCE) + "  ",
    ]
    for word, row in zip(TARGET, weights.tolist(), strict=True):
        lines.append(f"{word:<6}" + "".join(f"{x:6.2f}" for x in row) + "  ")
    return [line.ljust(26) for line in lines]


def run(steps: int = 60, seed: int = 0) -> int:
    """Print the showcase; returns a process exit code (1 if a weight row does not sum to one)."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    keys = torch.randn(len(SOURCE), DIM, generator=generator)
    queries = _queries(keys, 0.5, generator)

    bahdanau = Additive(DIM, DIM, d_hidden=32)
    luong = General(DIM, DIM)
    print(f"Fitting the additive and general scores for {steps} steps on noisy queries ...")
    for name, score in (("additive", bahdanau), ("general", luong)):
        print(f"  {name:<9} final loss {_fit(score, keys, generator, steps):.4f}")

    modules = [
        ("Bahdanau (additive)", bahdanau, "softmax"),
        ("Luong (general)", luong, "softmax"),
        ("Vaswani (scaled dot)", ScaledDot(), "softmax"),
        ("scaled dot + sparsemax", ScaledDot(), Sparsemax()),
    ]
    blocks, ok = [], True
    with torch.no_grad():
        for title, score, align in modules:
            out = attention(
                queries[None], keys[None], keys[None], score=score, align=align, return_weights=True
            )
            weights = out.weights[0]
            ok &= bool(torch.allclose(weights.sum(-1), torch.ones(len(TARGET)), atol=1e-6))
            ok &= weights.argmax(-1).tolist() == GOLD
            blocks.append(_matrix_lines(title, weights))
    print("\nAttention weights (rows: French target words, columns: English source words)\n")
    for row in zip(*blocks, strict=True):
        print("  ".join(row).rstrip())
    print("\nEvery row sums to one and peaks on the gold alignment: " + ("yes" if ok else "NO"))
    return 0 if ok else 1
