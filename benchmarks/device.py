"""The key rows on whatever device is here: one command for the day a GPU is.

    python benchmarks/device.py             # CUDA if available (n = 4096), else CPU (n = 1024)
    python benchmarks/device.py --quick     # tiny sizes, to check the script itself

For fp32 and bf16 (CPU: fp32 only unless ``--bf16``), each row times attnkit against the
implementation a user would otherwise call, on the same inputs, and prints the ratio of times
(< 1: attnkit faster) and the largest absolute difference of the outputs:

* SDPA parity: ``ak.attention`` against ``torch.nn.functional.scaled_dot_product_attention``,
  forward and forward + backward;
* a soft-capping ``score_mod`` against compiled FlexAttention (``torch.nn.attention.flex_attention``
  under ``torch.compile``), forward and forward + backward;
* the additive score's compiled block kernel (backend ``additive``, one head) against its naive
  formula ``vᵀ tanh(W₁q + W₂k)`` materialised;
* weights on demand (``return_weights=True``) against SDPA without weights;
* ``ak.MultiHeadAttention`` against ``torch.nn.MultiheadAttention`` with the same weights
  (``need_weights=True``), forward and forward + backward.

Medians of interleaved repetitions; on CUDA each timed function ends with a synchronisation.
Nothing is claimed for a device this script has not run on: the table names the device it ran on.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

import attnkit as ak

CAP = 30.0  # soft-capping: 30 · tanh(s / 30), as Gemma 2
NAIVE_ADDITIVE_N = 2048  # the additive row's length at most (see rows_for)


def soft_cap(score, b, h, q_idx, kv_idx):  # type: ignore[no-untyped-def]
    return CAP * torch.tanh(score / CAP)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return common.machine()


def synced(fn: Callable[[], object], device: torch.device) -> Callable[[], object]:
    def run() -> object:
        out = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return out

    return run


def with_backward(fn: Callable[[], object], inputs: list[torch.Tensor]) -> Callable[[], object]:
    """``fn`` then the backward of its output (an AttentionOutput's context, or a tuple's first)."""

    def run() -> object:
        for t in inputs:
            t.grad = None
        out = fn()
        out = getattr(out, "context", out)
        out = out[0] if isinstance(out, tuple) else out
        out.backward(torch.ones_like(out))
        return out

    return run


def output_of(fn: Callable[[], object]) -> torch.Tensor:
    out = fn()
    out = getattr(out, "context", out)
    return (out[0] if isinstance(out, tuple) else out).detach().float()


def rows_for(device: torch.device, dtype: torch.dtype, n: int, repeats: int) -> list[list[str]]:
    torch.manual_seed(0)
    b, h, d, e = 1, 8, 64, 512
    opts = {"device": device, "dtype": dtype}
    q, k, v = (torch.randn(b, h, n, d, **opts, requires_grad=True) for _ in range(3))
    # the naive formula holds [B, n, n, d_w] hidden units (4 GiB in fp32 at n = 4096, more
    # with its backward): at most NAIVE_ADDITIVE_N, so that it fits a 16 GiB GPU
    n_additive = min(n, NAIVE_ADDITIVE_N)
    x = torch.randn(b, n_additive, d, **opts, requires_grad=True)
    additive = ak.scores.Additive(d, d, 64).to(**opts)

    def naive_additive() -> torch.Tensor:
        hidden = torch.tanh(additive.query_proj(x)[:, :, None] + additive.key_proj(x)[:, None])
        a = torch.softmax(additive.out(hidden).squeeze(-1), -1)
        return a @ x

    from torch.nn.attention.flex_attention import flex_attention

    flex = torch.compile(flex_attention, dynamic=False)
    # FlexAttention has no backward on the CPU: there its inputs must not require grad
    flex_backward = device.type == "cuda"
    qkv_flex = (q, k, v) if flex_backward else tuple(t.detach() for t in (q, k, v))
    tokens = torch.randn(b, n, e, **opts, requires_grad=True)
    ours = ak.MultiHeadAttention(e, h, batch_first=True).to(**opts)
    theirs = torch.nn.MultiheadAttention(e, h, batch_first=True).to(**opts)
    theirs.load_state_dict(ours.state_dict())
    pairs = {
        "SDPA parity": (
            lambda: ak.attention(q, k, v),
            lambda: F.scaled_dot_product_attention(q, k, v),
        ),
        "soft-capping score_mod vs compiled Flex": (
            lambda: ak.attention(*qkv_flex, score_mod=soft_cap),
            lambda: flex(*qkv_flex, score_mod=soft_cap),
        ),
        # the compiled block kernel by name: left to the engine, small calls stay on `tiled`
        "additive (H=1, d_w=64) compiled kernel vs naive formula": (
            lambda: ak.attention(x, x, x, score=additive, backend="additive"),
            naive_additive,
        ),
        "weights on demand vs SDPA without": (
            lambda: ak.attention(q, k, v, return_weights=True),
            lambda: F.scaled_dot_product_attention(q, k, v),
        ),
        "MultiHeadAttention need_weights vs torch": (
            lambda: ours(tokens, tokens, tokens, need_weights=True),
            lambda: theirs(tokens, tokens, tokens, need_weights=True),
        ),
    }
    rows = []
    inputs = [q, k, v, x, tokens, *ours.parameters(), *theirs.parameters(), *additive.parameters()]
    for name, (mine, peer) in pairs.items():
        size = n_additive if name.startswith("additive") else n
        with torch.no_grad():
            diff = (output_of(mine) - output_of(peer)).abs().max().item()
        for backward in (False, True):
            if backward and name.startswith("weights on demand"):
                continue  # a forward-only comparison: the weights are what is asked for
            if backward and "Flex" in name and not flex_backward:
                rows.append([str(dtype).removeprefix("torch."), str(size), name, "fwd+bwd",
                             "—", "—", "—", "FlexAttention has no backward on the CPU"])  # fmt: skip
                continue
            a, p = (with_backward(f, inputs) if backward else f for f in (mine, peer))
            t = common.interleaved_medians(
                {"attnkit": synced(a, device), "peer": synced(p, device)}, repeats
            )
            rows.append(
                [
                    str(dtype).removeprefix("torch."),
                    str(size),
                    name,
                    "fwd+bwd" if backward else "fwd",
                    f"{1e3 * t['attnkit']:.2f}",
                    f"{1e3 * t['peer']:.2f}",
                    f"{t['attnkit'] / t['peer']:.2f}",
                    f"{diff:.1e}",
                ]
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repetition")
    parser.add_argument("--n", type=int, help="sequence length (override)")
    parser.add_argument("--bf16", action="store_true", help="bf16 rows on the CPU too")
    parser.add_argument("--repeats", type=int, help="interleaved repetitions (default 5)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--note", default="", help="appended to the section's note (load, etc.)")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(1)
    n = args.n or (64 if args.quick else (4096 if device.type == "cuda" else 1024))
    repeats = args.repeats or (1 if args.quick else 5)
    dtypes = [torch.float32]
    if device.type == "cuda" or args.bf16:
        dtypes.append(torch.bfloat16)
    start = time.perf_counter()
    rows = [row for dtype in dtypes for row in rows_for(device, dtype, n, repeats)]
    header = ["dtype", "n", "row", "pass", "attnkit ms", "peer ms", "attnkit/peer", "max |diff|"]
    seconds = time.perf_counter() - start
    lines = [
        f"## The key rows on one device: {device.type.upper()} (`python benchmarks/device.py`)",
        "",
        f"Device: {device_name(device)}; medians of {repeats} interleaved rounds; B=1, H=8, D=64, "
        f"MHA E=512; the whole script took {seconds:.0f} s. Ratios are attnkit/peer (< 1: "
        "attnkit faster); max |diff| compares the outputs.",
        "",
        common.table(header, rows),
        "",
    ]
    print("\n".join(lines))
    # one section per device type: a GPU's run adds its own beside the CPU's
    if not (args.quick or args.no_write):
        common.save_section(f"device_{device.type}", lines, [], note=args.note)
        print(f"wrote {common.write_docs()}")


if __name__ == "__main__":
    main()
