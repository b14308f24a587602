"""Efficient attention quality: one small model per attention kind, trained for the same CPU time on
ListOps (Long Range Arena) and multi-query associative recall (MQAR), test accuracy side by side.

    OMP_NUM_THREADS=1 python benchmarks/efficient_quality.py --tasks listops &
    OMP_NUM_THREADS=1 python benchmarks/efficient_quality.py --tasks mqar     # full, 1.5 min/kind
    OMP_NUM_THREADS=1 python benchmarks/efficient_quality.py --quick       # tiny sizes: a smoke test

The model is the same for every kind except its attention: token + learned position embeddings,
two pre-norm encoder layers (``x + MHA(LN(x))``, ``x + FFN(LN(x))``) whose attention is
``ak.MultiHeadAttention(attention=NAME)`` (``"exact"``: attnkit's engine), a final LayerNorm, and
a readout: ListOps mean-pools the non-padding positions (``--pool cls`` reads a prepended
classification token instead) into 10 classes; MQAR reads every position out over the vocabulary,
scored at the query positions only.

Masking: ListOps is a classification of the whole expression, so attention is bidirectional for
every kind. MQAR is, as in Zoology, a task for a causal model: every kind that can be causal runs
causal. That is not a detail: with bidirectional attention the same 2-layer exact-attention model
stays on the plateau of "some value of the context" (loss ~ln D, accuracy ~1/D) for 9,800 steps,
while causally it solves the task (100 % test accuracy) within 2,000 steps. A causal model only
has to find "the token after the earlier copy of my key" (an induction head); bidirectionally each
key also sees its later queries and the random tokens after them. Linformer and Nyström refuse
``causal=True`` (their projections and landmarks mix every position), so on MQAR they run
bidirectional, and the run adds ``exact:bidirectional`` as their like-for-like reference.

Budget: each kind trains for ``--minutes`` of this process's CPU time (``time.process_time``, one
thread), with the same seed, the same initial weights of the shared parts and the same batches
in the same order; evaluation is outside the budget. The issue allows at most 10 minutes each.
Data (see their modules): ListOps from ``attnkit.data.listops`` (LRA's generator and limits:
depth <= 10, <= 10 arguments, 500-2000 tokens; training and test examples are disjoint slices of
one seeded stream), MQAR from ``attnkit.data.associative_recall`` (Zoology's construction; test
sequences from a seed no training batch uses).

For context, the ListOps column "LRA" quotes Table 1 of Tay et al. 2021 (a different budget:
far longer training, on 96,000 examples).

The full run writes one section per task ("Efficient attention, quality at equal CPU time: …")
into docs/benchmarks.md, through the shared results file like benchmarks/efficient.py, and
benchmarks/results/efficient_quality_TASK.json; the two tasks may run as two processes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

import attnkit as ak
import attnkit.efficient  # registers the kinds with MultiHeadAttention
from attnkit.core.kinds import kind_names
from attnkit.data import listops
from attnkit.data.associative_recall import IGNORE, multiquery_associative_recall
from attnkit.efficient.synthesizer import SynthesizerAttention

ROOT = Path(__file__).resolve().parent.parent
KINDS = (
    "exact",
    "sliding_window",
    "longformer",
    "bigbird",
    "linear",
    "performer",
    "nystrom",
    "lsh",
    "linformer",
    "synthesizer_dense",
)
#: ListOps accuracy (%) in Table 1 of Tay et al. 2021 (Long Range Arena), by the attnkit kind
#: closest to each row: Local Attention is a sliding window, Reformer is LSH attention.
#: Checked against the leaderboard of the official repository's README
#: (google-research/long-range-arena, "as of 8th November 2020"), which lists the paper's values.
LRA_LISTOPS = {
    "exact": ("Transformer", 36.37),
    "sliding_window": ("Local Attention", 15.82),
    "longformer": ("Longformer", 35.63),
    "bigbird": ("BigBird", 36.05),
    "linear": ("Linear Trans.", 16.13),
    "performer": ("Performer", 18.01),
    "lsh": ("Reformer", 37.27),
    "linformer": ("Linformer", 35.70),
    "synthesizer_dense": ("Synthesizer", 36.99),
}


def sized_kind(kind: str, max_len: int) -> str | SynthesizerAttention:
    """What to build ``kind`` with: its registered name, except ``synthesizer_dense``, whose
    registered default maps each query to 4096 scores and slices them; here it is a kind object
    configured for the task's own longest input, so it does not pay for 4096 (a new object per
    call: one per module)."""
    if kind != "synthesizer_dense":
        return kind
    return SynthesizerAttention("dense", max_len)


class PreNormLayer(nn.Module):
    """``x + MHA(LN(x))`` then ``x + FFN(LN(x))``; the attention is the only part that varies."""

    def __init__(self, d_model: int, heads: int, attention: str) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.feed_forward = nn.Sequential(
            nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model)
        )
        # last, so a kind with its own parameters does not shift the draws of the shared parts
        self.attention = ak.MultiHeadAttention(
            d_model, heads, batch_first=True, attention=attention
        )

    def forward(self, x: Tensor, padding: Tensor | None, causal: bool) -> Tensor:
        h = self.norm1(x)
        x = (
            x
            + self.attention(
                h, h, h, key_padding_mask=padding, need_weights=False, is_causal=causal
            )[0]
        )
        return x + self.feed_forward(self.norm2(x))


class Encoder(nn.Module):
    """Embeddings, two pre-norm layers, a final LayerNorm: ``tokens [B, L]`` → ``[B, L, d]``."""

    def __init__(self, vocab: int, max_len: int, d_model: int, heads: int, attention: str):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(max_len, d_model)
        self.norm = nn.LayerNorm(d_model)
        # each layer from its own seed: every kind starts from the same embeddings, readout and
        # feed-forward weights, whatever parameters the attention kind of the layer before drew
        seed = int(torch.randint(2**31, ()))
        layers = []
        for i in range(2):
            torch.manual_seed(seed + i)
            layers.append(PreNormLayer(d_model, heads, sized_kind(attention, max_len)))
        self.layers = nn.ModuleList(layers)

    def forward(self, tokens: Tensor, padding: Tensor | None, causal: bool = False) -> Tensor:
        x = self.tokens(tokens) + self.positions.weight[: tokens.shape[1]]
        for layer in self.layers:
            x = layer(x, padding, causal)
        return self.norm(x)


class ListOpsClassifier(nn.Module):
    def __init__(self, attention: str, max_len: int, d_model: int, heads: int, pool: str):
        super().__init__()
        self.pool = pool
        self.readout = nn.Linear(d_model, listops.NUM_CLASSES)
        self.encoder = Encoder(len(listops.VOCABULARY), max_len, d_model, heads, attention)

    def forward(self, tokens: Tensor) -> Tensor:
        padding = tokens == listops.PAD
        h = self.encoder(tokens, padding)
        if self.pool == "cls":
            return self.readout(h[:, 0])
        keep = (~padding).unsqueeze(-1).to(h.dtype)
        return self.readout((h * keep).sum(1) / keep.sum(1))


class RecallModel(nn.Module):
    """Logits over the vocabulary at every position (scored at the query positions only)."""

    def __init__(
        self, attention: str, vocab: int, max_len: int, d_model: int, heads: int, causal: bool
    ):
        super().__init__()
        self.causal = causal
        self.readout = nn.Linear(d_model, vocab)
        self.encoder = Encoder(vocab, max_len, d_model, heads, attention)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.readout(self.encoder(tokens, None, self.causal))


@dataclass
class Task:
    """Batches (the same sequence for every kind) and a scorer."""

    name: str
    make_model: Callable[[str, bool], nn.Module]  # (kind, causal)
    batch: Callable[[int], tuple[Tensor, Tensor]]  # step -> (inputs, targets)
    test: list[tuple[Tensor, Tensor]]
    loss: Callable[[Tensor, Tensor], Tensor]
    correct: Callable[[Tensor, Tensor], tuple[int, int]]  # (right, counted)
    describe: str
    causal: bool = False  # the task's masking, for every kind that supports it
    baseline: tuple[str, float] | None = None  # a trivial rule and its test accuracy


def pad_batch(examples: list[listops.ListOpsExample], cls: bool) -> tuple[Tensor, Tensor]:
    ids = [listops.encode(e.tokens, cls=cls) for e in examples]
    width = max(len(i) for i in ids)
    tokens = torch.full((len(ids), width), listops.PAD, dtype=torch.long)
    for row, i in enumerate(ids):
        tokens[row, : len(i)] = torch.tensor(i)
    return tokens, torch.tensor([e.label for e in examples])


def listops_task(args) -> Task:
    lengths = (args.listops_min, args.listops_max)
    start = time.perf_counter()
    stream = listops.generate_listops(
        args.train_examples + args.test_examples,
        seed=args.seed,
        min_length=lengths[0],
        max_length=lengths[1],
    )
    train, test = stream[: args.train_examples], stream[args.train_examples :]
    print(f"ListOps: {len(stream)} examples in {time.perf_counter() - start:.0f} s", flush=True)
    cls = args.pool == "cls"
    # batches of similar lengths (sorted, then cut), visited in a seeded random order, so padding
    # stays small and every kind sees the same batches
    order = sorted(range(len(train)), key=lambda i: len(train[i].tokens))
    chunks = [order[i : i + args.batch_size] for i in range(0, len(order), args.batch_size)]
    g = torch.Generator().manual_seed(args.seed)
    schedule: list[int] = []

    def batch(step: int) -> tuple[Tensor, Tensor]:
        while len(schedule) <= step:
            schedule.extend(torch.randperm(len(chunks), generator=g).tolist())
        return pad_batch([train[i] for i in chunks[schedule[step]]], cls)

    test_sorted = sorted(test, key=lambda e: len(e.tokens))
    test_batches = [pad_batch(test_sorted[i : i + 16], cls) for i in range(0, len(test), 16)]
    labels = [e.label for e in test]
    majority = max(labels.count(c) for c in range(10)) / len(labels)
    mode = max(range(10), key=labels.count)
    max_len = lengths[1] + 1
    return Task(
        "listops",
        lambda kind, causal: ListOpsClassifier(kind, max_len, args.d_model, args.heads, args.pool),
        batch,
        test_batches,
        F.cross_entropy,
        lambda logits, y: (int((logits.argmax(-1) == y).sum()), len(y)),
        f"ListOps, {lengths[0]}-{lengths[1]} tokens (LRA's generator), {len(train)} training / "
        f"{len(test)} test examples, {args.pool} pooling",
        causal=False,
        baseline=(f"majority class (always {mode})", majority),
    )


def recall_task(args) -> Task:
    size = (args.mqar_len, args.mqar_pairs, args.mqar_vocab)

    def batch(step: int) -> tuple[Tensor, Tensor]:
        # a fresh seeded batch per step (Zoology draws a fixed training set; here the stream is
        # unbounded and identical for every kind); test seeds are negative, never a step
        return multiquery_associative_recall(args.batch_size, *size, seed=args.seed * 10**6 + step)

    x, y = multiquery_associative_recall(args.test_examples, *size, seed=-(args.seed + 1))
    test = [(x[i : i + 32], y[i : i + 32]) for i in range(0, len(x), 32)]

    def loss(logits: Tensor, targets: Tensor) -> Tensor:
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)

    def correct(logits: Tensor, targets: Tensor) -> tuple[int, int]:
        asked = targets != IGNORE
        return int((logits.argmax(-1)[asked] == targets[asked]).sum()), int(asked.sum())

    return Task(
        "mqar",
        lambda kind, causal: RecallModel(kind, size[2], size[0], args.d_model, args.heads, causal),
        batch,
        test,
        loss,
        correct,
        f"MQAR, length {size[0]}, {size[1]} key-value pairs, vocabulary {size[2]} (Zoology's "
        f"construction), {args.test_examples} test sequences",
        causal=True,
        # a model that has learned "answer with one of the context's values" but not which one
        baseline=("a uniformly chosen value of the context", 1 / size[1]),
    )


def supports_causal(kind: str) -> bool:
    """Whether ``kind`` accepts ``is_causal=True`` (Linformer and Nyström raise ValueError)."""
    attention = ak.MultiHeadAttention(8, 1, batch_first=True, attention=sized_kind(kind, 8))
    x = torch.zeros(1, 8, 8)
    try:
        attention(x, x, x, need_weights=False, is_causal=True)
    except ValueError:
        return False
    return True


def runs(task: Task, kinds: list[str]) -> list[tuple[str, bool]]:
    """``(kind, causal)`` for each kind: the task's masking where the kind supports it; on a
    causal task, exact attention is also run bidirectionally when some kind has to be."""
    out = [(k, task.causal and supports_causal(k)) for k in kinds]
    if task.causal and "exact" in kinds and any(not causal for _, causal in out):
        out.insert(kinds.index("exact") + 1, ("exact", False))
    return out


def train_and_test(task: Task, kind: str, causal: bool, args) -> dict:
    torch.manual_seed(args.seed)
    model = task.make_model(kind, causal)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    budget = args.minutes * 60
    step, losses = 0, []
    start = time.process_time()
    while time.process_time() - start < budget:
        x, y = task.batch(step)
        loss = task.loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        step += 1
    spent = time.process_time() - start
    model.eval()
    right = total = 0
    with torch.no_grad():
        for x, y in task.test:
            r, n = task.correct(model(x), y)
            right, total = right + r, total + n
    tail = losses[-max(1, len(losses) // 10) :]
    return {
        "kind": kind,
        "causal": causal,
        "steps": step,
        "cpu_seconds": spent,
        "final_loss": sum(tail) / len(tail) if tail else float("nan"),
        "accuracy": right / total,
    }


def section(task: Task, results: list[dict]) -> list[str]:
    """The task's table: each kind beside exact attention with the same masking, the trivial
    baseline, and (ListOps) the LRA paper's number."""
    exact = {r["causal"]: r["accuracy"] for r in results if r["kind"] == "exact"}
    name, chance = task.baseline if task.baseline else ("", None)
    header = ["attention", "mask", "steps", "train loss (last 10%)", "test accuracy %"]
    header += ["vs exact (same mask)", "trivial baseline %"]
    if task.name == "listops":
        header += ["LRA Table 1 (model: accuracy %)"]
    rows = []
    for r in results:
        reference = exact.get(r["causal"])
        row = [
            r["kind"],
            "causal" if r["causal"] else "bidirectional",
            str(r["steps"]),
            f"{r['final_loss']:.3f}",
            f"{100 * r['accuracy']:.2f}",
            "—" if reference is None else f"{100 * (r['accuracy'] - reference):+.2f}",
            "—" if chance is None else f"{100 * chance:.2f}",
        ]
        if task.name == "listops":
            model, value = LRA_LISTOPS.get(r["kind"], ("—", None))
            row.append("—" if value is None else f"{model}: {value:.2f}")
        rows.append(row)
    lines = [common.table(header, rows), ""]
    if chance is not None:
        lines += [f"Trivial baseline: {name}, {100 * chance:.2f}% of the test targets.", ""]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes and budget: smoke test")
    parser.add_argument("--tasks", default="listops,mqar", help="comma-separated: listops, mqar")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated attention kinds")
    parser.add_argument("--minutes", type=float, default=1.5, help="CPU minutes per kind and task")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (budget is CPU time)")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--pool", choices=("mean", "cls"), default="mean")
    parser.add_argument("--train-examples", type=int, default=5000, help="ListOps training set")
    parser.add_argument("--test-examples", type=int, default=500)
    parser.add_argument("--listops-min", type=int, default=500)
    parser.add_argument("--listops-max", type=int, default=2000)
    parser.add_argument("--mqar-len", type=int, default=64)
    parser.add_argument("--mqar-pairs", type=int, default=8)
    parser.add_argument("--mqar-vocab", type=int, default=128)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    if args.quick:
        args.minutes = min(args.minutes, 0.05)
        args.train_examples, args.test_examples = 64, 32
        args.listops_min, args.listops_max = 40, 160
        args.mqar_len, args.mqar_pairs, args.mqar_vocab = 64, 8, 128
    if not 0 < args.minutes <= 10:
        raise SystemExit(f"--minutes must be in (0, 10] (the issue's budget), got {args.minutes}")
    kinds = args.kinds.split(",")
    registered = set(kind_names())
    unknown = [k for k in kinds if k not in registered]
    if unknown:
        raise SystemExit(f"unknown attention kinds {unknown}; expected some of {KINDS}")
    torch.set_num_threads(args.threads)
    machine = common.machine()
    print(f"Measured on: {machine}.", flush=True)
    builders = {"listops": listops_task, "mqar": recall_task}
    setup = (
        f"Each attention kind trains the same 2-layer pre-norm encoder (d={args.d_model}, "
        f"{args.heads} heads, FFN 2d, Adam lr {args.lr}, batch {args.batch_size}, seed "
        f"{args.seed}) for {args.minutes:g} CPU minute(s) on {args.threads} thread(s), with the "
        "same batches; registered hyperparameters (docs/efficient.md; the dense Synthesizer "
        "sized to the task's longest input). Steps differ because kinds differ in speed: that "
        "is the comparison; evaluation is outside the budget. Reproduce: "
        "`OMP_NUM_THREADS=1 python benchmarks/efficient_quality.py --tasks TASK --minutes "
        f"{args.minutes:g}`."
    )
    masks = {
        "listops": "Attention is bidirectional for every kind (a whole-sequence classification).",
        "mqar": "As in Zoology, the model is causal: every kind that can be causal runs causal; "
        "Linformer and Nyström refuse `causal=True`, so they run bidirectional, next to exact "
        'attention run bidirectional too ("vs exact" compares with exact under the same mask). '
        "The score is the accuracy of the value predicted at each query position.",
    }
    lra = (
        "The LRA column is context only: Tay et al. 2021 trained far longer, on 96,000 examples "
        "of up to 2,000 tokens (values as listed in the leaderboard of the official LRA "
        "repository's README, 8 November 2020)."
    )
    for name in args.tasks.split(","):
        if name not in builders:
            raise SystemExit(f"unknown task {name!r}; expected listops or mqar")
    for name in args.tasks.split(","):
        task = builders[name](args)
        results = []
        for kind, causal in runs(task, kinds):
            result = train_and_test(task, kind, causal, args)
            results.append(result)
            mask = "causal" if causal else "bidirectional"
            print(
                f"{name} {kind} ({mask}): {result['steps']} steps, "
                f"loss {result['final_loss']:.3f}, "
                f"accuracy {100 * result['accuracy']:.2f}%",
                flush=True,
            )
        table = section(task, results)
        print("\n".join(table), flush=True)
        if args.quick or args.no_write:
            continue
        # one section per task, so the two tasks can run as two processes on two cores
        lines = [f"## Efficient attention, quality at equal CPU time: {task.describe}", ""]
        lines += [setup + " " + masks[name] + (" " + lra if name == "listops" else ""), ""]
        lines += table
        common.save_section(
            f"efficient/quality/{name}",
            lines,
            [],
            note="One seed; at these budgets accuracies move by a few points between seeds.",
        )
        out = ROOT / "benchmarks" / "results" / f"efficient_quality_{name}.json"
        record = {"machine": machine, "args": vars(args), "describe": task.describe}
        out.write_text(json.dumps({**record, "results": results}, indent=1))
        print(f"wrote {common.write_docs()}")


if __name__ == "__main__":
    main()
