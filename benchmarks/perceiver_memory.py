"""Perceiver memory: peak memory of a forward + backward pass against the input length.

    python benchmarks/perceiver_memory.py            # lengths 4k … 64k
    python benchmarks/perceiver_memory.py --quick    # 1k … 4k, to check the script itself

The Perceiver's latents cross-attend to the input (``N`` queries × ``M`` keys) and then only
self-attend (``N × N``), so its activations grow linearly in ``M``. Each configuration runs in a
fresh subprocess and reports its peak RSS (VmHWM) beyond a baseline process that imports, builds
the model and the input and runs a tiny warm-up but not the measured call (see common.py). For
contrast, the same input through one layer of full self-attention with materialised weights
(the reference backend, ``O(M²)``) is measured where it fits. Prints a markdown table; the
numbers are quoted in docs/beyond-sequences.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

import attnkit as ak
from attnkit.mechanisms.latent import PerceiverEncoder

CHANNELS, D_LATENT, LATENTS, HEADS = 32, 64, 64, 4


def runner(spec: dict):
    """A forward + backward pass of one configuration, built once."""
    torch.manual_seed(0)
    x = torch.randn(1, spec["m"], CHANNELS, requires_grad=True)
    if spec["impl"] == "perceiver":
        model = PerceiverEncoder(
            CHANNELS, D_LATENT, LATENTS, num_heads=HEADS, num_latent_layers=2, num_blocks=2
        )

        def forward() -> torch.Tensor:
            return model(x)

    else:  # full self-attention over the input, weights materialised: the O(M²) contrast
        projection = torch.nn.Linear(CHANNELS, 3 * D_LATENT)

        def forward() -> torch.Tensor:
            q, k, v = projection(x).unflatten(-1, (3, HEADS, -1)).transpose(1, 3).unbind(2)
            return ak.attention(q, k, v, backend="reference").context

    def run() -> None:
        x.grad = None
        forward().sum().backward()

    return run


def measure(payload: str) -> None:
    """Subprocess entry: run one configuration once (or only its set-up) and print the peak."""
    spec = json.loads(payload)
    fn = runner(spec)
    runner({**spec, "m": 8})()  # warm-up of the libraries and thread pools, in both processes
    if not spec["baseline"]:
        fn()
    print(common.maxrss_mib())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="small lengths only")
    args = parser.parse_args()
    if args.measure:
        measure(args.measure)
        return
    lengths = [1024, 2048, 4096] if args.quick else [4096, 8192, 16384, 32768, 65536]
    full_limit = 8192  # M² · heads · 4 bytes per score tensor: 1 GiB each at 8k, 4 GiB at 16k
    print(f"Machine: {common.machine()}")
    print(
        f"Perceiver: {LATENTS} latents of {D_LATENT}, {CHANNELS} input channels, 2 blocks of "
        f"cross-attention + 2 latent layers; batch 1, float32, forward + backward.\n"
    )
    rows = []
    for m in lengths:
        perceiver = common.peak_memory_mib(__file__, {"impl": "perceiver", "m": m})
        full = (
            common.peak_memory_mib(__file__, {"impl": "full", "m": m}) if m <= full_limit else None
        )
        per_k = None if perceiver is None else perceiver / (m / 1024)
        rows.append(
            [
                f"{m:,}",
                "—" if perceiver is None else f"{perceiver:.0f}",
                "—" if per_k is None else f"{per_k:.1f}",
                "—" if full is None else f"{full:.0f}",
            ]
        )
        print(f"  M={m}: perceiver {perceiver} MiB, full self-attention {full} MiB", flush=True)
    header = [
        "input length M",
        "Perceiver peak MiB",
        "Perceiver MiB per 1k inputs",
        "full self-attention MiB",
    ]
    print()
    print(common.table(header, rows))


if __name__ == "__main__":
    main()
