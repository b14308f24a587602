"""attnkit against the libraries users would otherwise pick, side by side in one process (issue 18).

    python benchmarks/peers.py                      # every comparison; writes docs/benchmarks.md
    python benchmarks/peers.py --quick              # tiny sizes, 1 repetition: checks the script
    python benchmarks/peers.py --only mha,lsh --no-write

Peers (installed for the benchmark only; pinned to the versions measured; ``--no-deps`` because
local-attention and x-transformers pull hyper-connections / torch-einops-utils, which need
torch >= 2.5 and would upgrade an older torch; the other names are their small pure-Python
dependencies; ``pip install -e .[bench]`` does the same where torch is already >= 2.5)::

    pip install --no-deps entmax==1.3 nystrom-attention==0.0.14 performer-pytorch==1.1.4 linformer==0.2.3 reformer-pytorch==1.4.4 local-attention==1.11.2 x-transformers==2.31.10 einops==0.8.2 einx==0.4.3 frozendict==2.5.1 loguru==0.7.3 torch-einops-utils==0.2.0 hyper-connections==0.4.11 axial-positional-embedding==0.3.12 product-key-memory==0.3.0 colt5-attention==0.11.2

Each row runs attnkit and its peer(s) on the same inputs (same weights copied in where the peer is
a module), interleaved (A, B, A, B, …; common.interleaved_medians), 1 thread by default
(``--threads``). "attnkit/peer" is the ratio of median times, < 1 = attnkit faster. Memory is the
peak RSS of one call beyond the RSS before it, in a fresh process per (row, configuration,
implementation): the process makes the call once at full size (lazy initialisation, torch.compile),
releases free heap memory (malloc_trim) and resets its high-water mark (/proc/self/clear_refs),
then makes the call again; a baseline process stops before the second call
(common.peak_memory_mib). "agree" is the largest absolute difference of attnkit's output from the
peer's, or from a float64 reference where the peer computes something different by design.

Rows (``--only NAME``), B = 1, H = 8, d = 64, fp32 unless stated; "fwd" runs under no_grad,
"fwd+bwd" backpropagates ``output.sum()`` to the inputs (and parameters):

* ``mha``: ``ak.MultiHeadAttention(512, 8, batch_first=True)`` loaded with the state_dict of
  ``torch.nn.MultiheadAttention(512, 8, batch_first=True)``, self-attention x [2, n, 512],
  n = 512, 1024, 2048, need_weights True (torch's default, weights averaged over heads) and False;
  fwd in eval mode (torch takes its native fast path there), fwd+bwd in train mode (dropout 0).
* ``encoder``: ``ak.layers.TransformerEncoderLayer(512, 8, 2048, dropout, batch_first=True)``
  loaded from torch's, one training step (forward, mean-square loss, backward, SGD step) on
  x [B, n, 512], (B, n) = (8, 128), (4, 512), dropout 0.1 and 0.0; "agree" compares eval-mode
  outputs (dropout draws differ by design).
* ``weights``: ``ak.attention(q, k, v, return_weights=True)`` vs the materialised formula
  (``w = softmax(q kᵀ/√d)``, ``w v``, both returned) and vs SDPA without weights; fwd,
  n = 512, 1024, 2048.
* ``sdpa``: ``ak.attention`` default vs ``F.scaled_dot_product_attention``, n = 1024, 4096,
  causal and not, fwd and fwd+bwd.
* ``entmax``: ``ak.attention(align="sparsemax" | "entmax15")`` vs ``entmax.sparsemax`` /
  ``entmax.entmax15`` applied to the materialised scores, n = 512 … 8192, fwd and fwd+bwd (the
  peer is skipped where its estimated peak exceeds ``--max-gib``).
* ``nystrom``: ``nystrom_attention.NystromAttention(dim=512, dim_head=64, heads=8,
  num_landmarks=64, pinv_iterations=6, residual=False)`` vs its own projections (weights copied)
  around ``attnkit.efficient.nystrom_attention(landmarks=64, pinv_iterations=6)``,
  n = 1024, 4096, 16384, fwd+bwd.
* ``performer``: ``performer_pytorch.FastAttention(64, nb_features=256, causal=…)`` vs
  ``attnkit.efficient.performer_attention`` with the same random features ω [256, 64]
  (attnkit's ``orthogonal_gaussian``, copied into the peer's buffer), n = 1024, 4096, 16384,
  causal and not, fwd+bwd.
* ``linformer``: ``linformer.LinformerSelfAttention(dim=512, seq_len=n, k=256, heads=8)`` vs the
  same projections and E, F (copied) around ``attnkit.efficient.linformer_attention``,
  n = 1024, 4096, 16384, fwd+bwd.
* ``sliding_window``: ``local_attention.LocalAttention(window_size=256, look_backward=1,
  look_forward=0 if causal else 1, exact_windowsize=True)`` (every query sees the keys within
  256 positions, 257 with its own: a true sliding window) vs
  ``attnkit.efficient.sliding_window_attention(window=257)`` (the same keys), n = 1024, 4096,
  16384, causal and not, fwd+bwd.
* ``lsh``: ``reformer_pytorch.LSHAttention(bucket_size=64, n_hashes=1, causal=…,
  attend_across_buckets=False)`` vs ``attnkit.efficient.lsh_attention(q, q, v, bucket_size=64,
  n_rounds=1)`` (shared QK, 2n/64 ⇒ n/64 buckets in both), n = 2048, 8192, causal and not,
  fwd+bwd; the random rotations differ, so "agree" gives both errors from exact shared-QK
  attention in float64.
* ``softcap``: ``ak.attention(score_mod=30·tanh(s/30))`` vs ``x_transformers.attend.Attend(
  softclamp_logits=True, logit_softclamp_value=30)`` and vs ``torch.compile(flex_attention)``
  with the same score_mod, n = 2048, 4096, 8192, fwd only (Flex has no CPU backward).
* ``additive``: ``ak.attention(score=ak.scores.Additive(64, 64, 256))`` vs the same score
  materialised (``score(q, k).softmax(-1) @ v``), H = 1, n = 512, 1024, 2048, fwd+bwd.
* ``decode``: greedy decoding of benchmarks/decode.py's model (256-d, 4 layers, rotary) with the
  KV cache vs recomputing the whole prefix per token, prompts 256 and 1024, 128 new tokens.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib.util
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

import attnkit as ak
from attnkit.efficient import (
    linformer_attention,
    lsh_attention,
    nystrom_attention,
    orthogonal_gaussian,
    performer_attention,
    sliding_window_attention,
)

HERE = Path(__file__).resolve()
D, HEADS, E = 64, 8, 512
#: the docstring's pip line (one source for the docs section)
PIP = next(line.strip() for line in __doc__.splitlines() if "pip install --no-deps" in line)


# --- shared pieces ----------------------------------------------------------------------------


def qkv(n: int, grad: bool, heads: int = HEADS, d: int = D) -> list[Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1, heads, n, d, generator=g).requires_grad_(grad) for _ in range(3)]


def detach(out: object) -> object:
    if isinstance(out, tuple):
        return tuple(detach(o) for o in out)
    return out.detach() if isinstance(out, Tensor) else out


def timed(call: Callable[[], object], leaves: list[Tensor], backward: bool) -> Callable[[], object]:
    """``call`` under no_grad, or forward+backward of its (first) output's sum; returns the
    forward output, detached."""
    if not backward:

        def forward() -> object:
            with torch.no_grad():
                return call()

        return forward

    def forward_backward() -> object:
        for t in leaves:
            t.grad = None
        out = call()
        (out[0] if isinstance(out, tuple) else out).sum().backward()
        return detach(out)

    return forward_backward


def softcap(s: Tensor, b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
    return 30 * torch.tanh(s / 30)


def heads_of(x: Tensor) -> Tensor:
    return x.unflatten(-1, (HEADS, -1)).transpose(1, 2)  # [B, n, H·d] -> [B, H, n, d]


def merge_heads(x: Tensor) -> Tensor:
    return x.transpose(1, 2).flatten(2)


_FLEX = None


def compiled_flex() -> Callable[..., Tensor]:
    global _FLEX
    if _FLEX is None:
        from torch.nn.attention.flex_attention import flex_attention

        _FLEX = torch.compile(flex_attention, dynamic=False)
    return _FLEX


# --- one builder per row: (impl, cfg) -> zero-argument callable returning the output ----------


def build_mha(impl: str, cfg: dict) -> Callable[[], object]:
    torch.manual_seed(0)
    module: nn.Module = nn.MultiheadAttention(E, HEADS, batch_first=True)
    if impl == "attnkit":
        ours = ak.MultiHeadAttention(E, HEADS, batch_first=True)
        ours.load_state_dict(module.state_dict())
        module = ours
    grad = cfg["mode"] == "fwd+bwd"
    module.train(grad)
    x = torch.randn(2, cfg["n"], E, generator=torch.Generator().manual_seed(1))
    x.requires_grad_(grad)
    return timed(lambda: module(x, x, x, need_weights=cfg["weights"]), [x], grad)


def encoder_layers(impl: str, dropout: float) -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, HEADS, 2048, dropout, batch_first=True)
    if impl == "attnkit":
        ours = ak.layers.TransformerEncoderLayer(E, HEADS, 2048, dropout, batch_first=True)
        ours.load_state_dict(layer.state_dict())
        layer = ours
    return layer


def encoder_input(cfg: dict) -> Tensor:
    return torch.randn(cfg["batch"], cfg["n"], E, generator=torch.Generator().manual_seed(1))


def build_encoder(impl: str, cfg: dict) -> Callable[[], object]:
    layer = encoder_layers(impl, cfg["dropout"]).train()
    optimiser = torch.optim.SGD(layer.parameters(), lr=1e-4)
    x = encoder_input(cfg)

    def step() -> Tensor:
        optimiser.zero_grad(set_to_none=True)
        out = layer(x)
        out.square().mean().backward()
        optimiser.step()
        return out.detach()

    return step


def check_encoder(impl: str, cfg: dict) -> object:
    """Eval-mode output (dropout off), for the "agree" column."""
    with torch.no_grad():
        return encoder_layers(impl, cfg["dropout"]).eval()(encoder_input(cfg))


def build_weights(impl: str, cfg: dict) -> Callable[[], object]:
    q, k, v = qkv(cfg["n"], False)
    if impl == "attnkit":

        def call() -> object:
            out = ak.attention(q, k, v, return_weights=True)
            return out.context, out.weights
    elif impl == "naive":

        def call() -> object:
            w = (q @ k.transpose(-1, -2) * D**-0.5).softmax(-1)
            return w @ v, w
    else:

        def call() -> object:
            return F.scaled_dot_product_attention(q, k, v)

    return timed(call, [], False)


def build_sdpa(impl: str, cfg: dict) -> Callable[[], object]:
    grad = cfg["mode"] == "fwd+bwd"
    q, k, v = qkv(cfg["n"], grad)
    if impl == "attnkit":
        return timed(lambda: ak.attention(q, k, v, causal=cfg["causal"]).context, [q, k, v], grad)
    return timed(
        lambda: F.scaled_dot_product_attention(q, k, v, is_causal=cfg["causal"]), [q, k, v], grad
    )


def build_entmax(impl: str, cfg: dict) -> Callable[[], object]:
    grad = cfg["mode"] == "fwd+bwd"
    q, k, v = qkv(cfg["n"], grad)
    if impl == "attnkit":
        return timed(lambda: ak.attention(q, k, v, align=cfg["align"]).context, [q, k, v], grad)
    import entmax

    normalise = getattr(entmax, cfg["align"])
    return timed(lambda: normalise(q @ k.transpose(-1, -2) * D**-0.5, dim=-1) @ v, [q, k, v], grad)


def nystrom_weights() -> tuple[nn.Linear, nn.Linear]:
    torch.manual_seed(0)
    return nn.Linear(E, 3 * E, bias=False), nn.Linear(E, E)


def build_nystrom(impl: str, cfg: dict) -> Callable[[], object]:
    to_qkv, to_out = nystrom_weights()
    x = torch.randn(1, cfg["n"], E, generator=torch.Generator().manual_seed(1), requires_grad=True)
    if impl == "attnkit":

        def call() -> Tensor:
            q, k, v = (heads_of(t) for t in to_qkv(x).chunk(3, -1))
            context = nystrom_attention(q, k, v, landmarks=64, pinv_iterations=6).context
            return to_out(merge_heads(context))

        return timed(call, [x], True)
    from nystrom_attention import NystromAttention

    peer = NystromAttention(
        dim=E, dim_head=D, heads=HEADS, num_landmarks=64, pinv_iterations=6, residual=False
    )
    peer.to_qkv.load_state_dict(to_qkv.state_dict())
    peer.to_out[0].load_state_dict(to_out.state_dict())
    return timed(lambda: peer(x), [x], True)


def build_performer(impl: str, cfg: dict) -> Callable[[], object]:
    q, k, v = qkv(cfg["n"], True)
    omega = orthogonal_gaussian(256, D, generator=torch.Generator().manual_seed(0))
    if impl == "attnkit":
        return timed(
            lambda: performer_attention(q, k, v, projection=omega, causal=cfg["causal"]).context,
            [q, k, v],
            True,
        )
    from performer_pytorch import FastAttention

    peer = FastAttention(D, nb_features=256, causal=cfg["causal"])
    peer.projection_matrix.copy_(omega)
    return timed(lambda: peer(q, k, v), [q, k, v], True)


def linformer_weights(n: int) -> dict[str, Tensor | nn.Linear]:
    torch.manual_seed(0)
    return {
        "to_q": nn.Linear(E, E, bias=False),
        "to_k": nn.Linear(E, E, bias=False),
        "to_v": nn.Linear(E, E, bias=False),
        "proj_k": torch.randn(n, 256) / 16,  # [n, k], the peer's layout (E = proj_kᵀ)
        "proj_v": torch.randn(n, 256) / 16,
        "to_out": nn.Linear(E, E),
    }


def build_linformer(impl: str, cfg: dict) -> Callable[[], object]:
    w = linformer_weights(cfg["n"])
    x = torch.randn(1, cfg["n"], E, generator=torch.Generator().manual_seed(1), requires_grad=True)
    if impl == "attnkit":
        e, f = (nn.Parameter(w[name].T.contiguous()) for name in ("proj_k", "proj_v"))

        def call() -> Tensor:
            q, k, v = (heads_of(w[name](x)) for name in ("to_q", "to_k", "to_v"))
            context = linformer_attention(q, k, v, key_projection=e, value_projection=f).context
            return w["to_out"](merge_heads(context))

        return timed(call, [x], True)
    from linformer import LinformerSelfAttention

    peer = LinformerSelfAttention(dim=E, seq_len=cfg["n"], k=256, heads=HEADS)
    with torch.no_grad():
        for name in ("to_q", "to_k", "to_v", "to_out"):
            getattr(peer, name).load_state_dict(w[name].state_dict())
        peer.proj_k.copy_(w["proj_k"])
        peer.proj_v.copy_(w["proj_v"])
    return timed(lambda: peer(x), [x], True)


def build_sliding_window(impl: str, cfg: dict) -> Callable[[], object]:
    q, k, v = qkv(cfg["n"], True)
    causal = cfg["causal"]
    if impl == "attnkit":
        return timed(
            lambda: sliding_window_attention(q, k, v, window=257, causal=causal).context,
            [q, k, v],
            True,
        )
    from local_attention import LocalAttention

    peer = LocalAttention(
        window_size=256,
        causal=causal,
        look_backward=1,
        look_forward=0 if causal else 1,
        exact_windowsize=True,
    )
    return timed(lambda: peer(q, k, v), [q, k, v], True)


def build_lsh(impl: str, cfg: dict) -> Callable[[], object]:
    qk, _, v = qkv(cfg["n"], True)
    causal = cfg["causal"]
    if impl == "attnkit":
        return timed(
            lambda: lsh_attention(qk, qk, v, bucket_size=64, n_rounds=1, causal=causal).context,
            [qk, v],
            True,
        )
    from reformer_pytorch.reformer_pytorch import LSHAttention

    torch.manual_seed(0)  # the peer draws its rotations from the global generator
    peer = LSHAttention(bucket_size=64, n_hashes=1, causal=causal, attend_across_buckets=False)
    peer.eval()  # training mode caches the buckets for reversible layers: not wanted here

    def call() -> Tensor:
        out, _, _ = peer(qk.flatten(0, 1), v.flatten(0, 1))
        return out.view_as(v)

    return timed(call, [qk, v], True)


def exact_reference(cfg: dict) -> Tensor:
    """Softmax attention in float64 (causal as configured)."""
    q, k, v = (t.double() for t in qkv(cfg["n"], False))
    return F.scaled_dot_product_attention(q, k, v, is_causal=cfg["causal"]).float()


def lsh_reference(cfg: dict) -> Tensor:
    """Exact shared-QK attention in float64 (keys = queries normalised; a query attends its own
    position only when it has no other key), one head at a time."""
    qk, _, v = (t.double() for t in qkv(cfg["n"], False))
    n = cfg["n"]
    out = torch.empty_like(v)
    allowed = torch.ones(n, n, dtype=torch.bool)
    if cfg["causal"]:
        allowed = allowed.tril()
    allowed &= ~torch.eye(n, dtype=torch.bool)
    allowed[0, 0] = not allowed[0].any()  # first query (causal): only itself
    for h in range(qk.shape[1]):
        s = qk[0, h] @ F.normalize(qk[0, h], dim=-1).T * D**-0.5
        out[0, h] = s.masked_fill(~allowed, -math.inf).softmax(-1) @ v[0, h]
    return out.float()


def build_softcap(impl: str, cfg: dict) -> Callable[[], object]:
    q, k, v = qkv(cfg["n"], False)
    if impl == "attnkit":
        return timed(lambda: ak.attention(q, k, v, score_mod=softcap).context, [], False)
    if impl == "flex":
        flex = compiled_flex()
        return timed(lambda: flex(q, k, v, score_mod=softcap), [], False)
    from x_transformers.attend import Attend

    peer = Attend(softclamp_logits=True, logit_softclamp_value=30.0)
    return timed(lambda: peer(q, k, v)[0], [], False)


def build_additive(impl: str, cfg: dict) -> Callable[[], object]:
    q, k, v = qkv(cfg["n"], True, heads=1)
    torch.manual_seed(0)
    score = ak.scores.Additive(D, D, 256)
    if impl == "attnkit":
        return timed(lambda: ak.attention(q, k, v, score=score).context, [q, k, v], True)
    return timed(lambda: score(q, k).softmax(-1) @ v, [q, k, v], True)


def build_decode(impl: str, cfg: dict) -> Callable[[], object]:
    from decode import make_model

    from attnkit.layers.decoding import greedy

    model = make_model(cfg["tiny"])
    prompt = torch.randint(0, model.vocab_size, (1, cfg["n"]), generator=torch.Generator())
    new = cfg["new"]

    def run() -> Tensor:
        with torch.no_grad():
            caches = model.new_caches(cfg["n"] + new) if impl == "attnkit" else None
            return greedy(lambda t, c: model(t, caches=c), prompt, new, caches)

    return run


# --- the rows ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Peer:
    label: str
    module: str | None = None  # importable name; None: part of torch
    pip: str = ""


@dataclass(frozen=True)
class Row:
    """One comparison: attnkit ("attnkit") against each of ``peers`` on every configuration."""

    name: str
    title: str
    build: Callable[[str, dict], Callable[[], object]]
    configs: Callable[[bool], list[dict]]  # quick -> configurations
    peers: dict[str, Peer]
    check: Callable[[str, dict], object] | None = None  # outputs for "agree", if not the call's
    reference: Callable[[dict], object] | None = None  # float64 reference (peer differs by design)
    peer_gib: Callable[[str, dict], float] = lambda impl, cfg: 0.0  # the peer's estimated peak
    max_repeats: int | None = None
    note: str = ""


def grid(**axes: list) -> list[dict]:
    """Every combination of the axes' values, the first axis slowest."""
    out: list[dict] = [{}]
    for key, values in axes.items():
        out = [{**c, key: v} for c in out for v in values]
    return out


MODES = ["fwd", "fwd+bwd"]
GIB = 2**30


def entmax_gib(impl: str, cfg: dict) -> float:
    # the materialised scores and their normalised copies; measured factors per score tensor
    # (benchmarks/exact.py: sparsemax 2.7, 1.5-entmax 4.3 at n = 4096 and 8192)
    factor = {"sparsemax": 2.7, "entmax15": 4.3}[cfg["align"]]
    per = HEADS * cfg["n"] ** 2 * 4 * factor
    return per * (3 if cfg["mode"] == "fwd+bwd" else 2) / GIB


ROWS = [
    Row(
        "mha",
        "`ak.MultiHeadAttention` vs `torch.nn.MultiheadAttention` (E = 512, H = 8, B = 2)",
        build_mha,
        lambda quick: grid(
            n=[64] if quick else [512, 1024, 2048], weights=[True, False], mode=MODES
        ),
        {"torch": Peer("torch.nn.MultiheadAttention")},
    ),
    Row(
        "encoder",
        "`ak.layers.TransformerEncoderLayer` vs torch's, one training step (E = 512, H = 8, "
        "FF 2048, SGD)",
        build_encoder,
        lambda quick: [
            {**bn, "dropout": p}
            for bn in (
                [{"batch": 2, "n": 32}]
                if quick
                else [{"batch": 8, "n": 128}, {"batch": 4, "n": 512}]
            )
            for p in (0.1, 0.0)
        ],
        {"torch": Peer("torch.nn.TransformerEncoderLayer")},
        check=check_encoder,
        note="agree: eval-mode outputs (with dropout the draws differ by design).",
    ),
    Row(
        "weights",
        "`ak.attention(..., return_weights=True)`, scaled dot, vs the materialised formula and "
        "vs SDPA without weights",
        build_weights,
        lambda quick: grid(n=[64] if quick else [512, 1024, 2048], mode=["fwd"]),
        {
            "naive": Peer("materialised softmax(q kᵀ/√d), weights returned"),
            "sdpa": Peer("F.scaled_dot_product_attention, no weights"),
        },
    ),
    Row(
        "sdpa",
        "SDPA parity: `ak.attention` vs `F.scaled_dot_product_attention`",
        build_sdpa,
        lambda quick: grid(n=[64] if quick else [1024, 4096], causal=[False, True], mode=MODES),
        {"sdpa": Peer("F.scaled_dot_product_attention")},
    ),
    Row(
        "entmax",
        "sparsemax and 1.5-entmax: `ak.attention(align=...)` vs the `entmax` package on "
        "materialised scores",
        build_entmax,
        lambda quick: grid(
            align=["sparsemax", "entmax15"],
            n=[64] if quick else [512, 1024, 2048, 4096, 8192],
            mode=MODES,
        ),
        {"entmax": Peer("entmax", "entmax", "entmax")},
        peer_gib=entmax_gib,
    ),
    Row(
        "nystrom",
        "Nyström (64 landmarks, 6 pinv iterations, E = 512) vs nystrom-attention",
        build_nystrom,
        lambda quick: grid(n=[256] if quick else [1024, 4096, 16384], mode=["fwd+bwd"]),
        {"peer": Peer("nystrom-attention", "nystrom_attention", "nystrom-attention")},
    ),
    Row(
        "performer",
        "Performer (FAVOR+, 256 features, same ω) vs performer-pytorch",
        build_performer,
        lambda quick: grid(
            n=[256] if quick else [1024, 4096, 16384], causal=[False, True], mode=["fwd+bwd"]
        ),
        {"peer": Peer("performer-pytorch", "performer_pytorch", "performer-pytorch")},
        reference=exact_reference,
        note="agree: both errors from exact softmax attention in float64 (attnkit / peer): the "
        "same features ω, but performer-pytorch adds 1e-4 to every feature, so the two estimates "
        "differ by design.",
    ),
    Row(
        "linformer",
        "Linformer (k = 256, E = 512, same E/F and projections) vs linformer",
        build_linformer,
        lambda quick: grid(n=[256] if quick else [1024, 4096, 16384], mode=["fwd+bwd"]),
        {"peer": Peer("linformer", "linformer", "linformer")},
    ),
    Row(
        "sliding_window",
        "Sliding window (±256 keys) vs local-attention (`exact_windowsize=True`)",
        build_sliding_window,
        lambda quick: grid(
            n=[512] if quick else [1024, 4096, 16384], causal=[False, True], mode=["fwd+bwd"]
        ),
        {"peer": Peer("local-attention", "local_attention", "local-attention")},
    ),
    Row(
        "lsh",
        "LSH (shared QK, chunks of 64, 1 round, own bucket only) vs reformer-pytorch",
        build_lsh,
        lambda quick: grid(
            n=[256] if quick else [2048, 8192], causal=[False, True], mode=["fwd+bwd"]
        ),
        {"peer": Peer("reformer-pytorch", "reformer_pytorch", "reformer-pytorch")},
        reference=lsh_reference,
        note="agree: the random rotations differ by design; both errors from exact shared-QK "
        "attention in float64 (attnkit / peer).",
    ),
    Row(
        "softcap",
        "Soft-capping `score_mod` (30·tanh(s/30)) vs x-transformers and compiled FlexAttention",
        build_softcap,
        lambda quick: grid(n=[128] if quick else [2048, 4096, 8192], mode=["fwd"]),
        {
            "xt": Peer("x-transformers Attend", "x_transformers", "x-transformers"),
            "flex": Peer("torch.compile(flex_attention)"),
        },
        peer_gib=lambda impl, cfg: HEADS * cfg["n"] ** 2 * 4 * 5 / GIB if impl == "xt" else 0.0,
    ),
    Row(
        "additive",
        "Additive score (d_w = 256, H = 1) vs the materialised formula",
        build_additive,
        lambda quick: grid(n=[64] if quick else [512, 1024, 2048], mode=["fwd+bwd"]),
        {"naive": Peer("score(q, k).softmax(-1) @ v")},
        peer_gib=lambda impl, cfg: cfg["n"] ** 2 * 256 * 4 * 3 / GIB,
    ),
    Row(
        "decode",
        "Greedy decoding with the KV cache vs recomputing the prefix (benchmarks/decode.py's "
        "model)",
        build_decode,
        lambda quick: [
            {"n": n, "new": 8 if quick else 128, "tiny": quick, "mode": "greedy"}
            for n in ([16] if quick else [256, 1024])
        ],
        {"recompute": Peer("no cache: the whole prefix per token")},
        max_repeats=3,
        note="n is the prompt length; agree: 0 means the same tokens.",
    ),
]
BY_NAME = {row.name: row for row in ROWS}


# --- measuring --------------------------------------------------------------------------------


def release_and_reset_peak() -> None:
    """Give free heap memory back to the OS and restart the peak-RSS count (VmHWM) here."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    with open("/proc/self/clear_refs", "w") as f:  # "5": reset the high-water mark (Linux >= 4.0)
        f.write("5")


def measure(payload: str) -> None:
    """Subprocess entry: one call at full size, reset the peak, then (unless baseline) a second
    call; print the peak RSS."""
    spec = json.loads(payload)
    torch.set_num_threads(spec["threads"])
    fn = BY_NAME[spec["row"]].build(spec["impl"], spec["cfg"])
    fn()
    release_and_reset_peak()
    if not spec["baseline"]:
        fn()
    print(common.maxrss_mib())


def max_abs(a: object, b: object) -> float:
    """Largest |a - b| over the tensors the two outputs share (a tuple's items pairwise)."""
    a_items = a if isinstance(a, tuple) else (a,)
    b_items = b if isinstance(b, tuple) else (b,)
    diffs = [
        (x.double() - y.double()).abs().max().item()
        for x, y in zip(a_items, b_items, strict=False)
        if isinstance(x, Tensor) and isinstance(y, Tensor) and x.shape == y.shape
    ]
    return max(diffs) if diffs else math.nan


def available(peer: Peer) -> bool:
    return peer.module is None or importlib.util.find_spec(peer.module) is not None


def fmt_ms(t: float | None) -> str:
    return "—" if t is None else f"{t * 1e3:.1f}" if t < 10 else f"{t:.1f} s"


def fmt_mib(m: float | None) -> str:
    return "—" if m is None else f"{m:.0f}" if m >= 10 else f"{m:.1f}"


def describe(cfg: dict) -> str:
    hidden = {"mode", "tiny", "new"}
    return ", ".join(f"{k}={v}" for k, v in cfg.items() if k not in hidden)


def run_config(row: Row, cfg: dict, args: argparse.Namespace, memory: bool) -> list[list[str]]:
    """Time (interleaved), check and (optionally) measure one configuration: one table row per
    peer."""
    notes: dict[str, str] = {}
    for impl, peer in row.peers.items():
        if not available(peer):
            notes[impl] = f"peer not installed (pip install {peer.pip})"
        elif (gib := row.peer_gib(impl, cfg)) > args.max_gib:
            notes[impl] = f"peer skipped: needs ~{gib:.0f} GiB (> --max-gib {args.max_gib:.0f})"
    fns: dict[str, Callable[[], object]] = {}
    outputs: dict[str, object] = {}
    for impl in ["attnkit", *(p for p in row.peers if p not in notes)]:
        try:
            fns[impl] = row.build(impl, cfg)
            outputs[impl] = row.check(impl, cfg) if row.check else fns[impl]()
        except Exception as error:  # a peer (or Flex's compiler) failing must not stop the rest
            print(f"{row.name} {cfg} {impl}: {error!r}", file=sys.stderr)
            notes[impl] = f"failed: {type(error).__name__}: {str(error)[:80]}"
            fns.pop(impl, None)
    if "attnkit" in notes:
        return [[describe(cfg), cfg.get("mode", ""), notes["attnkit"], *["—"] * 6]]
    big = cfg.get("n", 0) > 4096
    repeats = min(args.repeats, 2) if big else args.repeats
    if row.max_repeats:
        repeats = min(repeats, row.max_repeats)
    # the first call above warmed every function unless the outputs came from ``check``
    times = common.interleaved_medians(fns, repeats, warmup=1 if row.check else 0)
    mems: dict[str, float | None] = {}
    for impl in fns:
        spec = {"row": row.name, "cfg": cfg, "impl": impl, "threads": args.threads}
        mems[impl] = common.peak_memory_mib(str(HERE), spec, timeout=7200) if memory else None
    reference = row.reference(cfg) if row.reference else None
    out = []
    for impl, peer in row.peers.items():
        if impl in notes:
            agree = notes[impl]
        elif reference is not None:
            agree = f"{max_abs(outputs['attnkit'], reference):.1e} / {max_abs(outputs[impl], reference):.1e}"
        else:
            agree = f"{max_abs(outputs['attnkit'], outputs[impl]):.1e}"
        peer_t = times.get(impl)
        out.append(
            [
                describe(cfg),
                cfg.get("mode", "fwd+bwd"),
                peer.label,
                fmt_ms(times["attnkit"]),
                fmt_ms(peer_t),
                "—" if peer_t is None else f"{times['attnkit'] / peer_t:.2f}",
                fmt_mib(mems.get("attnkit")),
                fmt_mib(mems.get(impl)),
                agree,
            ]
        )
        print(" | ".join(out[-1]), flush=True)
    return out


HEADER = [
    "configuration",
    "pass",
    "peer",
    "attnkit ms",
    "peer ms",
    "attnkit/peer",
    "attnkit MiB",
    "peer MiB",
    "agree (max abs Δ)",
]


def run_row(row: Row, args: argparse.Namespace) -> list[str]:
    rows = []
    for i, cfg in enumerate(row.configs(args.quick)):
        memory = not args.no_memory and (not args.quick or i == 0)
        rows += run_config(row, cfg, args, memory)
    lines = [f"### {row.title}", "", common.table(HEADER, rows), ""]
    if row.note:
        lines += [row.note, ""]
    return lines


RAW = HERE.parent / "results" / "peers.json"


def section(blocks: dict[str, list[str]], threads: int, repeats: int) -> list[str]:
    intro = (
        "attnkit against the implementation a user would otherwise reach for, each pair on the "
        "same inputs and weights in one process, interleaved (medians of "
        f"{repeats} rounds, 2 above n = 4096), {threads} thread(s). attnkit/peer is the ratio of "
        "times: < 1 = attnkit faster. Memory: peak RSS of one warm call beyond the RSS before it, "
        "in a fresh process per implementation. agree: the largest absolute difference of "
        "attnkit's output from the peer's (or from a float64 reference, where the peer differs "
        "by design). Configurations of each pair: the docstring of benchmarks/peers.py. "
        "Reproduce: install the peers (only for this benchmark; `--no-deps` keeps an older "
        f"torch from being upgraded): `{PIP}`, then `python benchmarks/peers.py "
        "[--only ROW,...] [--threads N]`."
    )
    out = ["## Against the libraries users would otherwise pick", "", intro, ""]
    for row in ROWS:
        out += blocks.get(row.name, [])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 1 repetition")
    parser.add_argument("--only", type=lambda s: s.split(","), help="comma-separated rows")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--repeats", type=int, help="interleaved rounds (default 5; quick 1)")
    parser.add_argument("--no-memory", action="store_true", help="times only")
    parser.add_argument("--no-write", action="store_true", help="print only")
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    parser.add_argument(
        "--max-gib",
        type=float,
        default=0.8 * ram,
        help="skip a peer whose estimated peak exceeds this (default 80%% of RAM)",
    )
    args = parser.parse_args()
    if args.measure:
        measure(args.measure)
        return
    if args.only and (unknown := set(args.only) - set(BY_NAME)):
        raise SystemExit(f"unknown rows {sorted(unknown)}; expected some of {list(BY_NAME)}")
    torch.set_num_threads(args.threads)
    args.repeats = args.repeats or (1 if args.quick else 5)
    print(f"Measured on: {common.machine()}.\n", flush=True)
    blocks = {}
    for row in ROWS:
        if args.only and row.name not in args.only:
            continue
        print(f"## {row.name}: {row.title}", flush=True)
        blocks[row.name] = run_row(row, args)
        print("\n".join(blocks[row.name]), flush=True)
    if args.quick or args.no_write:
        return
    saved = json.loads(RAW.read_text()) if RAW.exists() else {}
    saved.update(blocks)  # rows not measured now keep their last measurement
    RAW.write_text(json.dumps(saved, indent=1))
    lines = section(saved, args.threads, args.repeats)
    common.save_section("peers", lines, [], note=f"{args.threads} thread(s).")
    print(f"wrote {common.write_docs()}")


if __name__ == "__main__":
    main()
