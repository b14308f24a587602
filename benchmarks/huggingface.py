"""Hugging Face models asked for their attention weights: attnkit's weights on demand vs eager.

    python benchmarks/huggingface.py            # lengths 512 … 4096 (a quiet machine, please)
    python benchmarks/huggingface.py --quick    # lengths 64, 128: checks the script itself

transformers' SDPA and flash implementations cannot return attention weights: with
``output_attentions=True`` users switch to ``attn_implementation="eager"``, which materialises
the scores, the softmax and the weights of every head as separate ``[B, H, L, L]`` tensors.
``attn_implementation="attnkit"`` returns them from the engine's ``dense`` backend: the scores
by one GEMM into the buffer the weights occupy, softmax in place, one GEMM with the values. A MiniLM-shaped BERT (6 layers, hidden 384, 12 heads, random weights), batch 1,
float32, inference (``torch.no_grad``), forward with ``output_attentions=True``; ``sdpa`` without
weights is shown for scale. Time: median of interleaved repetitions; memory: peak RSS of a fresh
subprocess beyond a baseline that builds the model and the input (benchmarks/common.py). Note
that the returned weights themselves take ``6 · 12 · L² · 4`` bytes (4.5 GiB at L = 4096).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

IMPLEMENTATIONS = {
    "eager, output_attentions": ("eager", True),
    "attnkit, output_attentions": ("attnkit", True),
    "sdpa, no weights": ("sdpa", False),
    "attnkit, no weights": ("attnkit", False),
}


def build(implementation: str, length: int):
    """The model on ``implementation`` and one input of ``length`` tokens."""
    import transformers
    from transformers import AutoModel, BertConfig

    import attnkit.integrations.huggingface  # noqa: F401  (registers "attnkit")

    transformers.logging.set_verbosity_error()
    config = BertConfig(
        vocab_size=30522,
        hidden_size=384,
        num_hidden_layers=6,
        num_attention_heads=12,
        intermediate_size=1536,
        max_position_embeddings=max(512, length),
    )
    torch.manual_seed(0)
    model = AutoModel.from_config(config, attn_implementation=implementation).eval()
    ids = torch.randint(1000, 30000, (1, length), generator=torch.Generator().manual_seed(0))
    return model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def runner(name: str, length: int):
    implementation, weights = IMPLEMENTATIONS[name]
    model, batch = build(implementation, length)

    def run() -> None:
        with torch.no_grad():
            out = model(**batch, output_attentions=weights)
        if weights:
            assert out.attentions is not None and out.attentions[0] is not None

    return run


def measure(payload: str) -> None:
    """Subprocess entry: run one configuration once (or only its set-up) and print the peak."""
    spec = json.loads(payload)
    run = runner(spec["name"], spec["length"])
    runner(spec["name"], 16)()  # warm-up of the libraries and thread pools, in both processes
    if not spec["baseline"]:
        run()
    print(common.maxrss_mib())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="lengths 64 and 128 only")
    parser.add_argument(
        "--repeats", type=int, default=None, help="timing rounds (default 5; 1 quick)"
    )
    args = parser.parse_args()
    if args.measure:
        measure(args.measure)
        return
    lengths = [64, 128] if args.quick else [512, 1024, 2048, 4096]
    repeats = args.repeats or (1 if args.quick else 5)
    print(f"Machine: {common.machine()}")
    print("MiniLM-shaped BERT (6 layers, 384 hidden, 12 heads), batch 1, float32, no_grad.\n")
    header = [
        "L",
        *(f"{name} s" for name in IMPLEMENTATIONS),
        *(f"{name} MiB" for name in IMPLEMENTATIONS),
    ]
    rows = []
    for length in lengths:
        fns = {name: runner(name, length) for name in IMPLEMENTATIONS}
        seconds = common.interleaved_medians(fns, repeats=repeats)
        del fns
        memory = {
            name: common.peak_memory_mib(__file__, {"name": name, "length": length})
            for name in IMPLEMENTATIONS
        }
        rows.append(
            [
                f"{length:,}",
                *(f"{seconds[name]:.3f}" for name in IMPLEMENTATIONS),
                *("—" if memory[n] is None else f"{memory[n]:.0f}" for n in IMPLEMENTATIONS),
            ]
        )
        print(f"  L={length}: {seconds} s; {memory} MiB", flush=True)
    print()
    print(common.table(header, rows))


if __name__ == "__main__":
    main()
