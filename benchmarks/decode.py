"""Decoding speed: tokens per second generating after long prompts, with and without a KV cache.

    python benchmarks/decode.py            # prompts 256, 1024, 4096; 128 new tokens (slow: the
                                           # uncached runs recompute the whole prefix per token)
    python benchmarks/decode.py --quick    # tiny sizes, to check the script itself

Greedy decoding of a decoder-only model (``attnkit.layers.language_model.CausalLanguageModel``,
rotary positions) with random weights. "with cache" prefills the prompt once and then feeds one
token per step (``O(length)`` attention per token); "without" runs the full causal forward over
the whole sequence for every new token (``O(length²)``). Tokens/s counts generated tokens only,
prefill included in the time. Medians of interleaved repetitions in one run; the ratio column is
what to compare across machines (target: >= 10x at a 1024-token prompt).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

from attnkit.layers.decoding import greedy
from attnkit.layers.language_model import CausalLanguageModel


def make_model(quick: bool) -> CausalLanguageModel:
    torch.manual_seed(0)
    if quick:
        return CausalLanguageModel(100, 32, 2, 1, 64, positional="rotary", max_len=256).eval()
    return CausalLanguageModel(1000, 256, 4, 4, 1024, positional="rotary", max_len=8192).eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repetition")
    parser.add_argument("--prompts", type=int, nargs="+", help="prompt lengths (override)")
    parser.add_argument("--new-tokens", type=int, help="tokens to generate (override)")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: robust on a shared machine)"
    )
    parser.add_argument("--repeats", type=int, help="interleaved repetitions (default 3)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    prompts, new_tokens, repeats = ([16, 64], 8, 1) if args.quick else ([256, 1024, 4096], 128, 3)
    prompts = args.prompts or prompts
    new_tokens = args.new_tokens or new_tokens
    repeats = args.repeats or repeats
    model = make_model(args.quick)

    def step(t: torch.Tensor, c: object) -> torch.Tensor:
        return model(t, caches=c)  # type: ignore[arg-type]

    rows = []
    speedups: dict[int, float] = {}
    for length in prompts:
        prompt = torch.randint(0, model.vocab_size, (1, length))
        outputs: dict[str, torch.Tensor] = {}

        def run(name: str, cached: bool, prompt: torch.Tensor, outputs: dict) -> Callable[[], None]:
            def fn() -> None:
                caches = model.new_caches(prompt.shape[1] + new_tokens) if cached else None
                outputs[name] = greedy(step, prompt, new_tokens, caches)

            return fn

        fns = {name: run(name, name == "cache", prompt, outputs) for name in ("cache", "no cache")}
        times = common.interleaved_medians(fns, repeats, warmup=0 if not args.quick else 1)
        same = torch.equal(outputs["cache"], outputs["no cache"])
        rate = {name: new_tokens / t for name, t in times.items()}
        speedup = rate["cache"] / rate["no cache"]
        speedups[length] = speedup
        rows.append(
            [
                str(length),
                str(new_tokens),
                f"{rate['cache']:.1f}",
                f"{rate['no cache']:.1f}",
                f"{speedup:.1f}x",
                "yes" if same else "NO",
            ]
        )
    header = [
        "prompt",
        "new tokens",
        "tokens/s with cache",
        "tokens/s without",
        "speed-up",
        "same tokens",
    ]
    lines = [
        f"## Decoding with and without the KV cache ({args.threads} thread(s), "
        f"{repeats} repetition(s))",
        "",
        common.table(header, rows),
        "",
    ]
    print("\n".join(lines))
    targets = []
    if 1024 in speedups:
        ok = speedups[1024] >= 10
        targets.append(
            (
                "decoding at a 1024-token prompt: >= 10x faster with the cache",
                f"{speedups[1024]:.1f}x",
                ok,
            )
        )
    if not args.no_write and not args.quick:
        common.save_section("decode", lines, targets)
        print(f"wrote {common.write_docs()}")


if __name__ == "__main__":
    main()
