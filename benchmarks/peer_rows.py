"""The comparisons of benchmarks/peers.py: for each row, how attnkit and its peer(s) are built on
one configuration (shapes, weights, the peer's settings matched to attnkit's), and the rows
themselves (names, configurations, what "agree" compares). The configurations are described in
peers.py's docstring.

Each builder takes ``(impl, cfg)`` (``impl``: ``"attnkit"`` or a key of the row's ``peers``) and
returns a zero-argument callable that runs one forward (under no_grad) or forward+backward and
returns the forward output, detached. attnkit's efficient kinds are called through the small
``attnkit_*`` functions just below, so a change of their API touches one place.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from decode import make_model
from torch import Tensor, nn

import attnkit as ak
from attnkit.efficient import (
    linformer_attention,
    lsh_attention,
    nystrom_attention,
    orthogonal_gaussian,
    performer_attention,
    sliding_window_attention,
)
from attnkit.layers.decoding import greedy

D, HEADS, E = 64, 8, 512


# --- attnkit's efficient kinds (the function-level API) ---------------------------------------


def attnkit_nystrom(q: Tensor, k: Tensor, v: Tensor, residual: Tensor | None = None) -> Tensor:
    return nystrom_attention(
        q, k, v, landmarks=64, pinv_iterations=6, residual_weight=residual
    ).context


def attnkit_performer(
    q: Tensor, k: Tensor, v: Tensor, omega: Tensor, causal: bool, relu: bool = False
) -> Tensor:
    kernel_fn = torch.relu if relu else None
    return performer_attention(
        q, k, v, projection=omega, causal=causal, kernel_fn=kernel_fn
    ).context


def attnkit_linformer(q: Tensor, k: Tensor, v: Tensor, e: Tensor, f: Tensor) -> Tensor:
    return linformer_attention(q, k, v, key_projection=e, value_projection=f).context


def attnkit_sliding_window(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
    # window 257: the 256 keys before (and, non-causal, after) each query plus its own
    return sliding_window_attention(q, k, v, window=257, causal=causal).context


def attnkit_local_blocks(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
    # blocks of 256: its own and the previous one (and, non-causal, the next one)
    forward = 0 if causal else 1
    return sliding_window_attention(
        q, k, v, window=256, look_backward=1, look_forward=forward, causal=causal
    ).context


def attnkit_lsh(qk: Tensor, v: Tensor, causal: bool, across: bool = False) -> Tensor:
    return lsh_attention(
        qk, qk, v, bucket_size=64, n_rounds=1, causal=causal, attend_across_buckets=across
    ).context


# --- shared pieces ----------------------------------------------------------------------------


def qkv(n: int, grad: bool, heads: int = HEADS, d: int = D) -> list[Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1, heads, n, d, generator=g).requires_grad_(grad) for _ in range(3)]


def detach(out: object) -> object:
    if isinstance(out, tuple):
        return tuple(detach(o) for o in out)
    return out.detach() if isinstance(out, Tensor) else out


def timed(call: Callable[[], object], leaves: list[Tensor], backward: bool) -> Callable[[], object]:
    """``call`` under no_grad, or forward+backward of its (first) output from a dense all-ones
    gradient (as a loss gives, not ``.sum()``'s stride-0 one, which a Linear copies); returns
    the forward output, detached."""
    if not backward:

        def forward() -> object:
            with torch.no_grad():
                return call()

        return forward

    def forward_backward() -> object:
        for t in leaves:
            t.grad = None
        out = call()
        first = out[0] if isinstance(out, tuple) else out
        first.backward(torch.ones_like(first))
        return detach(out)

    return forward_backward


def softcap(s: Tensor, b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
    return 30 * torch.tanh(s / 30)


#: ALiBi's head slopes for 8 heads, 2^(-8h/H) (Press et al. 2022), a tensor the score_mod indexes
ALIBI_SLOPES = 2.0 ** (-torch.arange(1, HEADS + 1, dtype=torch.float32))


def alibi(s: Tensor, b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
    return s - ALIBI_SLOPES[h] * (i - j).abs()


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
    residual = cfg.get("residual", False)
    conv = nn.Conv2d(HEADS, HEADS, (33, 1), padding=(16, 0), groups=HEADS, bias=False)
    x = torch.randn(1, cfg["n"], E, generator=torch.Generator().manual_seed(1), requires_grad=True)
    if impl == "attnkit":
        weight = conv.weight if residual else None

        def call() -> Tensor:
            q, k, v = (heads_of(t) for t in to_qkv(x).chunk(3, -1))
            return to_out(merge_heads(attnkit_nystrom(q, k, v, weight)))

        return timed(call, [x], True)
    from nystrom_attention import NystromAttention

    peer = NystromAttention(
        dim=E, dim_head=D, heads=HEADS, num_landmarks=64, pinv_iterations=6, residual=residual
    )
    peer.to_qkv.load_state_dict(to_qkv.state_dict())
    peer.to_out[0].load_state_dict(to_out.state_dict())
    if residual:
        peer.res_conv.load_state_dict(conv.state_dict())
    return timed(lambda: peer(x), [x], True)


def build_performer(impl: str, cfg: dict) -> Callable[[], object]:
    q, k, v = qkv(cfg["n"], True)
    omega = orthogonal_gaussian(256, D, generator=torch.Generator().manual_seed(0))
    relu = cfg.get("kernel") == "relu"
    if impl == "attnkit":
        return timed(
            lambda: attnkit_performer(q, k, v, omega, cfg["causal"], relu),
            [q, k, v],
            True,
        )
    from performer_pytorch import FastAttention

    peer = FastAttention(
        D, nb_features=256, causal=cfg["causal"], generalized_attention=relu, kernel_fn=nn.ReLU()
    )
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
            return w["to_out"](merge_heads(attnkit_linformer(q, k, v, e, f)))

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
    blocks = cfg.get("blocks", False)
    if impl == "attnkit":
        attend = attnkit_local_blocks if blocks else attnkit_sliding_window
        return timed(lambda: attend(q, k, v, causal), [q, k, v], True)
    from local_attention import LocalAttention

    peer = LocalAttention(
        window_size=256,
        causal=causal,
        look_backward=1,
        look_forward=0 if causal else 1,
        exact_windowsize=not blocks,
    )
    return timed(lambda: peer(q, k, v), [q, k, v], True)


def build_lsh(impl: str, cfg: dict) -> Callable[[], object]:
    qk, _, v = qkv(cfg["n"], True)
    causal = cfg["causal"]
    across = cfg.get("across", False)
    if impl == "attnkit":
        return timed(lambda: attnkit_lsh(qk, v, causal, across), [qk, v], True)
    from reformer_pytorch.reformer_pytorch import LSHAttention

    torch.manual_seed(0)  # the peer draws its rotations from the global generator
    peer = LSHAttention(bucket_size=64, n_hashes=1, causal=causal, attend_across_buckets=across)
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


def build_alibi(impl: str, cfg: dict) -> Callable[[], object]:
    q, k, v = qkv(cfg["n"], False)
    if impl == "attnkit":
        return timed(lambda: ak.attention(q, k, v, score_mod=alibi).context, [], False)
    flex = compiled_flex()
    return timed(lambda: flex(q, k, v, score_mod=alibi), [], False)


def build_additive(impl: str, cfg: dict) -> Callable[[], object]:
    q, k, v = qkv(cfg["n"], True, heads=1)
    torch.manual_seed(0)
    score = ak.scores.Additive(D, D, 256)
    if impl == "attnkit":
        return timed(lambda: ak.attention(q, k, v, score=score).context, [q, k, v], True)
    return timed(lambda: score(q, k).softmax(-1) @ v, [q, k, v], True)


def build_decode(impl: str, cfg: dict) -> Callable[[], object]:
    model = make_model(cfg["tiny"])
    prompt = torch.randint(
        0, model.vocab_size, (1, cfg["n"]), generator=torch.Generator().manual_seed(0)
    )
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
    # the package's peak RSS in units of one [H, n, n] float32 score tensor, measured by this
    # row (2026-11-25): sparsemax 8.2-8.3 (n = 4096 and 8192), 1.5-entmax 13.2-13.3 (n = 4096),
    # forward and forward+backward alike; the timing process holds a little more
    factor = {"sparsemax": 8.3, "entmax15": 13.3}[cfg["align"]]
    return HEADS * cfg["n"] ** 2 * 4 * factor / GIB


ROWS = [
    Row(
        "mha",
        "`ak.MultiHeadAttention` vs `torch.nn.MultiheadAttention` (E = 512, H = 8, B = 2)",
        build_mha,
        lambda quick: grid(
            n=[64] if quick else [512, 1024, 2048], weights=[True, False], mode=MODES
        ),
        {"torch": Peer("torch.nn.MultiheadAttention")},
        note="Memory is measured with `--mmap-threshold 131072`, the same for both sides: with "
        "glibc's default the threshold grows to 32 MiB as large blocks are freed, so whether a "
        "2–32 MiB tensor's pages count in the peak RSS depends on the heap's history. Two "
        "default-allocator runs of the same code (2026-11-25) gave attnkit 304 and 344 MiB for "
        "the n = 2048 forward with weights (torch 336 both times), and 32 vs 30 MiB at n = 512. "
        "At the allocator level (torch.profiler's memory timeline, which includes the "
        "temporaries inside torch's native kernel) that forward peaks at 30 vs 32 MiB at "
        "n = 512 and 308 vs 332 MiB at n = 2048.",
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
        note="At n = 8192 the package's 1.5-entmax is not run. Its peak is 13.3 times the "
        "[8, n, n] float32 scores (6,785 MiB at n = 4096, measured here), so about 27 GiB at "
        "8192, more than this machine's 24 GiB; a run whose estimate had let it start was "
        "killed by the kernel's OOM killer (2026-11-25). Its sparsemax, 8.3 times the scores, "
        "ran: 16.9 GiB at n = 8192. attnkit's memory stays between 28 and 136 MiB from "
        "n = 512 to 8192 for both (rows of queries at a time, so linear in n); the package's "
        "grows as n².",
    ),
    Row(
        "nystrom",
        "Nyström (64 landmarks, 6 pinv iterations, E = 512) vs nystrom-attention",
        build_nystrom,
        lambda quick: grid(n=[256] if quick else [1024, 4096, 16384], mode=["fwd+bwd"]),
        {"peer": Peer("nystrom-attention", "nystrom_attention", "nystrom-attention")},
    ),
    Row(
        "nystrom_residual",
        "Nyström with the depthwise-convolution value residual (kernel 33, the package's "
        "default; same weights) vs nystrom-attention",
        build_nystrom,
        lambda quick: grid(n=[256] if quick else [4096], residual=[True], mode=["fwd+bwd"]),
        {"peer": Peer("nystrom-attention", "nystrom_attention", "nystrom-attention")},
        note="`nystrom_attention(..., residual_weight=res_conv.weight)` vs "
        "`NystromAttention(..., residual=True)` with `res_conv` copied.",
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
        note="agree: max |Δ| from the peer; then both errors from exact softmax attention in "
        "float64 (attnkit / peer). The same features ω, but performer-pytorch adds 1e-4 to every "
        "feature after its stabiliser, which outweighs most key features and pulls its output "
        "towards the mean of v. Measured at n = 4096 non-causal (2026-11-25): attnkit is 1.4e-7 "
        "(mean |Δ|) from FAVOR+ computed in float64 with the same ω and no ε, and so is "
        "performer-pytorch with eps=0; against exact attention both then err by 0.096, the peer "
        "with its ε by 0.0163, and the mean of v alone by 0.0163.",
    ),
    Row(
        "performer_relu",
        "Performer, generalized attention with ReLU features (256 features, same ω) vs "
        "performer-pytorch (`generalized_attention=True`)",
        build_performer,
        lambda quick: grid(
            n=[256] if quick else [4096], causal=[False, True], kernel=["relu"], mode=["fwd+bwd"]
        ),
        {"peer": Peer("performer-pytorch", "performer_pytorch", "performer-pytorch")},
        note="`performer_attention(..., kernel_fn=torch.relu)` (φ(x) = ReLU(ωx) + 1e-3) vs "
        "`FastAttention(..., generalized_attention=True, kernel_fn=nn.ReLU())`, the same kernel.",
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
        "local_blocks",
        "Local attention in blocks of 256 (look back 1, forward 1 or 0 causal) vs local-attention "
        "(`exact_windowsize=False`)",
        build_sliding_window,
        lambda quick: grid(
            n=[512] if quick else [4096], causal=[False, True], blocks=[True], mode=["fwd+bwd"]
        ),
        {"peer": Peer("local-attention", "local_attention", "local-attention")},
        note="`sliding_window_attention(window=256, look_backward=1, look_forward=…)` vs "
        "`LocalAttention(window_size=256, look_backward=1, look_forward=…)`: the same keys.",
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
        note="agree: max |Δ| from the peer on the checked call, whose random rotations are the "
        "same (attnkit's seed 0 and the peer's draw right after `torch.manual_seed(0)` coincide); "
        "causal chunks differ by design (attnkit starts a chunk at each bucket's run, so no output "
        "depends on a later input); then both errors from exact shared-QK attention in float64 "
        "(attnkit / peer).",
    ),
    Row(
        "lsh_across",
        "LSH attending across buckets (chunks of 64, 1 round) vs reformer-pytorch "
        "(`attend_across_buckets=True`, its default)",
        build_lsh,
        lambda quick: grid(
            n=[256] if quick else [8192], causal=[False, True], across=[True], mode=["fwd+bwd"]
        ),
        {"peer": Peer("reformer-pytorch", "reformer_pytorch", "reformer-pytorch")},
        reference=lsh_reference,
        note="As the `lsh` row, with `attend_across_buckets=True` in both. Non-causal they attend "
        "the same keys (every key of the two chunks); causal, attnkit's first chunk of a bucket "
        "looks back at the previous bucket's chunk current when the bucket started (no future "
        "leak), reformer-pytorch's at that bucket's last chunk.",
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
        note="attnkit runs these calls on its `flex` backend (compiled FlexAttention over "
        "128-query tiles; B·H·n² >= 2^25 from n = 2048) and `--quick`'s n = 128 on `tiled`; "
        "the peer calls compiled FlexAttention without a block mask, as users do. Memory is "
        "measured on the call after the one that compiled.",
    ),
    Row(
        "alibi",
        "ALiBi `score_mod` (s − m_h·|i − j|, slopes 2^−h) vs compiled FlexAttention",
        build_alibi,
        lambda quick: grid(n=[128] if quick else [2048, 4096, 8192], mode=["fwd"]),
        {"flex": Peer("torch.compile(flex_attention)")},
        note="As the `softcap` row: attnkit runs these calls on its `flex` backend, so the ratio "
        "measures its block sizes and dispatch against FlexAttention's defaults, not another "
        "kernel. The slopes are a tensor the score_mod indexes by head.",
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
