"""The seq2seq Transformer's training step: its alignment asked of its module vs recorded.

    python benchmarks/seq2seq_step.py           # configs/tatoeba-transformer.yaml's sizes and a larger one
    python benchmarks/seq2seq_step.py --quick   # tiny sizes, to check the script itself

``TransformerSeq2Seq.forward`` returns the last decoder layer's cross-attention weights (the
alignment behind heatmaps, AER and supervised attention). Before, it read them by
wrapping every step in ``interpret.record(cross_attention, grad=True)``, which forces the
materialised ``reference`` backend for that attention; now it asks the module for them
(``need_weights=True``) and the engine picks the fastest backend that returns weights. Rows:

* ``need_weights`` — the model's forward as it is now;
* ``record(grad=True)`` — the former forward, rebuilt here through the public API;
* ``no weights`` — the decoder without the alignment, the floor the other two are measured against.

Each is one training step (forward, cross-entropy, backward, Adam) on a random batch; medians of
interleaved repetitions in one run, 1 thread by default.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

from attnkit.interpret import record
from attnkit.models import TransformerSeq2Seq


def recorded_forward(
    model: TransformerSeq2Seq, source, lengths, target_in
) -> tuple[Tensor, Tensor]:
    """The former forward: the cross-attention recorded with grad=True."""
    memory, padding = model.encode(source, lengths)
    cross_attention = model.transformer.decoder.layers[-1].multihead_attn
    with record(cross_attention, grad=torch.is_grad_enabled()) as recorder:
        hidden = model.transformer.decode(
            model._embed(model.target_embedding, target_in),
            memory,
            memory_key_padding_mask=padding,
            tgt_is_causal=True,
        )
    return model._head(hidden), recorder[""].mean(1)


def plain_forward(model: TransformerSeq2Seq, source, lengths, target_in) -> tuple[Tensor, None]:
    memory, padding = model.encode(source, lengths)
    hidden = model.transformer.decode(
        model._embed(model.target_embedding, target_in),
        memory,
        memory_key_padding_mask=padding,
        tgt_is_causal=True,
    )
    return model._head(hidden), None


def current_forward(model: TransformerSeq2Seq, source, lengths, target_in) -> tuple[Tensor, Tensor]:
    out = model(source, lengths, target_in)
    return out.logits, out.weights


def step_fn(size: dict, forward: Callable) -> Callable[[], float]:
    torch.manual_seed(0)
    vocab, batch, length = size["vocab"], size["batch"], size["length"]
    model = TransformerSeq2Seq(
        vocab,
        vocab,
        d_model=size["d_model"],
        nhead=size["nhead"],
        num_layers=size["layers"],
        dim_feedforward=4 * size["d_model"],
        dropout=0.1,
        max_length=length + 2,
    ).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    source = torch.randint(4, vocab, (batch, length))
    lengths = torch.randint(length // 2, length + 1, (batch,))
    target = torch.randint(4, vocab, (batch, length + 1))

    def step() -> float:
        optimizer.zero_grad()
        logits, weights = forward(model, source, lengths, target[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), target[:, 1:].flatten())
        if weights is not None:  # the weights are used, as supervised attention would
            loss = loss + 0.0 * weights.sum()
        loss.backward()
        optimizer.step()
        return float(loss)

    return step


SIZES = {
    "tatoeba-transformer (d 128, 2 layers, batch 64, length 10)": dict(
        vocab=4000, batch=64, length=10, d_model=128, nhead=4, layers=2
    ),
    "larger (d 256, 3 layers, batch 32, length 48)": dict(
        vocab=8000, batch=32, length=48, d_model=256, nhead=4, layers=3
    ),
}
QUICK = {"tiny": dict(vocab=50, batch=4, length=6, d_model=16, nhead=2, layers=1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repetition")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--repeats", type=int, default=15, help="interleaved repetitions")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sizes, repeats = (QUICK, 1) if args.quick else (SIZES, args.repeats)
    rows = []
    for label, size in sizes.items():
        times = common.interleaved_medians(
            {
                "need_weights": step_fn(size, current_forward),
                "record": step_fn(size, recorded_forward),
                "plain": step_fn(size, plain_forward),
            },
            repeats,
            warmup=2,
        )
        ms = {k: 1000 * v for k, v in times.items()}
        rows.append(
            [
                label,
                f"{ms['need_weights']:.1f}",
                f"{ms['record']:.1f}",
                f"{ms['plain']:.1f}",
                f"{ms['record'] / ms['need_weights']:.2f}x",
                f"{ms['need_weights'] / ms['plain']:.2f}x",
            ]
        )
    header = [
        "training step",
        "need_weights (now), ms",
        "record(grad=True) (before), ms",
        "no weights, ms",
        "before / now",
        "now / no weights",
    ]
    lines = [
        "## The seq2seq Transformer's training step",
        "",
        "`python benchmarks/seq2seq_step.py`: forward, cross-entropy, backward and Adam step of "
        "`TransformerSeq2Seq` (dropout 0.1) with its last cross-attention's weights asked of the "
        "module (`need_weights=True`, now) or recorded with `record(grad=True)` (the former way),"
        f" and without them; medians of {repeats} interleaved repetitions, "
        f"{torch.get_num_threads()} thread(s).",
        "",
        common.table(header, rows),
        "",
    ]
    print("\n".join(lines))
    if not args.quick and not args.no_write:
        common.save_section("seq2seq_step", lines, [])
        print(f"wrote {common.write_docs()}")


if __name__ == "__main__":
    main()
