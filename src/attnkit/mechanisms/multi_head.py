"""Multi-head attention (survey §3.3.2, eq. 38-40): a drop-in for ``torch.nn.MultiheadAttention``.

Each head ``j`` projects the queries and the feature vectors with its own weights (eq. 38), attends
with any score and alignment (eq. 39), and the heads' contexts are concatenated and projected by
``W_O`` (eq. 40). Rows are vectors, so the survey's ``q^(j) = W_q^(j) q`` is ``q W_q^(j)T`` here:

    q^(j) = q W_q^(j)T,   K^(j) = F W_K^(j)T,   V^(j) = F W_V^(j)T      (38)
    c^(j) = Σ_l a_l^(j) v_l^(j)                                      (39)
    c     = concat(c^(1), …, c^(d)) W_O^T                             (40)

Parameters and call conventions are torch's, so ``load_state_dict(torch_mha.state_dict())`` and
existing call sites work unchanged; the attention of all heads is one :func:`attnkit.attention`
call, so the engine picks its fastest exact path (SDPA, tiled online softmax, chunked).

Shapes (the legend of :mod:`attnkit`): B batch, H query heads, G key/value heads, M queries,
N keys, E embed_dim, D / Dv per-head key and value sizes (the survey's d_k / d_v).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import attnkit.efficient  # noqa: F401  (its kinds register their names: attention="linear", ...)
from attnkit.core.align import Align, Softmax, build_align
from attnkit.core.hooks import observed, runs_exact
from attnkit.core.kinds import EXACT, AttentionKind, create_kind
from attnkit.core.masks import causal as causal_mask
from attnkit.core.scores import ScaledDot, Score
from attnkit.mechanisms.head_scores import HeadwiseScore, build_head_scores
from attnkit.mechanisms.nested import pad_nested
from attnkit.mechanisms.torch_masks import (
    add_bias,
    and_allowed,
    check_torch_mask,
    engine_mask,
    merge_masks,
    split_torch_mask,
)
from attnkit.taxonomy import QueryType

__all__ = ["HeadwiseScore", "MultiHeadAttention", "build_head_scores", "engine_mask"]

#: bytes of the per-head weights one engine call writes when only their mean over heads is
#: returned (``need_weights=True`` with ``average_attn_weights``, nothing to differentiate):
#: the heads are attended in blocks of about this size, so the ``[B, H, M, N]`` weights never
#: exist at once. Blocks of this size stay below glibc's largest mmap threshold (32 MiB), so
#: their memory is reused from the heap rather than mapped (and zeroed) anew for each call, and
#: within a last-level cache, where the softmax, the mean and the weighted sum read them.
WEIGHTS_BLOCK = 8 << 20


class MultiHeadAttention(nn.Module):
    """Multi-head attention with any score (per head) and alignment (survey eq. 38-40).

    A drop-in for ``torch.nn.MultiheadAttention``: the same constructor arguments (and defaults,
    including ``batch_first=False``), parameter names and shapes, and ``forward`` conventions
    (torch's masks: ``True`` = NOT allowed), so ``load_state_dict(torch_mha.state_dict())`` works
    in every configuration torch supports and gives the same outputs and weights. Differences, by
    design: a query whose keys are all masked gets a zero context (so its output is
    ``out_proj.bias``) and zero weights, never NaN (torch: pytorch/pytorch#41508); ``is_causal``
    without ``attn_mask`` applies a bottom-right causal mask (torch raises); nested-tensor inputs
    are accepted in every mode, for self- and cross-attention (torch: its eval fast path only).
    In training mode the returned weights are after dropout, as torch's (the ones that multiplied
    the values; ``weights_after_dropout=False`` returns them before).

    Args:
        embed_dim: ``E``, size of the queries and of the output.
        num_heads: ``H``, number of query heads ``d`` of eq. (38).
        dropout: dropout on the attention weights, in training mode only.
        bias: biases of the input projections (``in_proj_bias``) and ``out_proj``.
        add_bias_kv: learn ``bias_k``, ``bias_v`` appended to the projected keys/values as one
            extra key (torch's).
        add_zero_attn: append a zero key and value to every head (torch's).
        kdim: size of the keys before projection (default ``E``).
        vdim: size of the values before projection (default ``E``).
        batch_first: inputs/outputs ``[B, M, E]`` instead of ``[M, B, E]``.
        device, dtype: of the parameters.
        num_kv_heads: ``G``, key/value heads (grouped-query attention; 1 = multi-query); each
            serves ``H / G`` query heads. Default ``H``.
        score: a score name or object, or one per head (see :func:`build_head_scores`);
            parametric names are built with the per-head sizes ``(d_k, d_k)``.
        align: an alignment name or object, shared by the heads, built with ``(d_k, d_k)``.
        head_dim_k: ``d_k``, query/key size per head (default ``E // H``).
        head_dim_v: ``d_v``, value size per head (default ``E // H``).
        attention: the attention kind (:mod:`attnkit.core.kinds`): a registered name
            (``"exact"``, the engine; ``"sliding_window"``, ``"linear"``, ``"linformer"``, … of
            ``attnkit.efficient``, with their default hyperparameters) or a configured kind
            object (``ak.efficient.LinformerAttention(max_length=8192)``), which this module
            binds to its head sizes and owns: a kind with parameters (Linformer, Performer,
            Synthesizer) is a submodule ``_attend`` (saved in the ``state_dict``) and cannot be
            given to a second module. ``self.attention`` is the kind's name (read-only).
        query_type: where the queries come from, in the survey's words (§3.3.1), for the
            taxonomy: ``"Self-Attentive"`` (default), ``"Basic"`` or ``"Specialized"``.

    Parameters: with ``kdim == vdim == E`` and default head sizes and ``G == H``, the packed
    ``in_proj_weight [3E, E]`` (rows: ``W_q``, ``W_K``, ``W_V`` of all heads, head ``j`` at rows
    ``j·d_k … (j+1)·d_k`` of each); otherwise ``q_proj_weight [H·D, E]``, ``k_proj_weight
    [G·D, kdim]``, ``v_proj_weight [G·Dv, vdim]``. ``in_proj_bias`` is always packed
    ``[H·D + G·D + G·Dv]``; ``out_proj`` is ``W_O``, an ``nn.Linear(H·d_v, E)``.

    Example::

        >>> import torch
        >>> from attnkit.mechanisms.multi_head import MultiHeadAttention
        >>> mha = MultiHeadAttention(64, 8, batch_first=True, num_kv_heads=2, score="additive")
        >>> x = torch.randn(2, 10, 64)
        >>> out, weights = mha(x, x, x, need_weights=True)
        >>> out.shape, weights.shape
        (torch.Size([2, 10, 64]), torch.Size([2, 10, 10]))
    """

    in_proj_weight: nn.Parameter | None
    q_proj_weight: nn.Parameter | None
    k_proj_weight: nn.Parameter | None
    v_proj_weight: nn.Parameter | None
    in_proj_bias: nn.Parameter | None
    bias_k: nn.Parameter | None
    bias_v: nn.Parameter | None

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        num_kv_heads: int | None = None,
        score: str | Score | Sequence[str | Score] = "scaled_dot",
        align: str | Align = "softmax",
        head_dim_k: int | None = None,
        head_dim_v: int | None = None,
        attention: str | AttentionKind = "exact",
        query_type: str = "Self-Attentive",
    ) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(
                f"embed_dim and num_heads must be > 0, got embed_dim={embed_dim}, "
                f"num_heads={num_heads}"
            )
        if (head_dim_k is None or head_dim_v is None) and embed_dim % num_heads:
            raise ValueError(
                f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads}) unless "
                "head_dim_k and head_dim_v are given"
            )
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_kv_heads <= 0 or num_heads % num_kv_heads:
            raise ValueError(
                f"num_kv_heads ({num_kv_heads}) must be > 0 and divide num_heads ({num_heads})"
            )
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout must be a probability in [0, 1), got {dropout}")
        try:
            QueryType(query_type)
        except ValueError:
            valid = ", ".join(repr(t.value) for t in QueryType)
            raise ValueError(
                f"unknown query_type {query_type!r}; expected one of: {valid}"
            ) from None
        self.embed_dim, self.num_heads, self.num_kv_heads = embed_dim, num_heads, num_kv_heads
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self.head_dim_k = embed_dim // num_heads if head_dim_k is None else head_dim_k
        self.head_dim_v = embed_dim // num_heads if head_dim_v is None else head_dim_v
        # a kind that is a module (parameters, buffers) registers as a submodule: saved with the
        # weights under ``_attend.*``
        kind = create_kind(attention).bind(num_heads, self.head_dim_k, self.head_dim_v)
        if isinstance(attention, str) and isinstance(kind, nn.Module):
            kind.to(device=device, dtype=dtype)  # built here, so placed like the projections
        self._attend: AttentionKind = kind
        self._attention_name = str(kind.name)
        self.head_dim = self.head_dim_k  # torch's name: the size the scores are scaled by
        self.dropout, self.batch_first, self.add_zero_attn = dropout, batch_first, add_zero_attn
        self.taxonomy: dict[str, object] = {
            "query_multiplicity": "Multi-Head",
            "query_type": query_type,
        }
        # A kind other than exact attention declares its own place (e.g. its alignment).
        self.taxonomy |= kind.taxonomy or {}

        def empty(*shape: int) -> nn.Parameter:
            return nn.Parameter(torch.empty(*shape, device=device, dtype=dtype))

        q_size = num_heads * self.head_dim_k
        k_size, v_size = num_kv_heads * self.head_dim_k, num_kv_heads * self.head_dim_v
        self._sizes = (q_size, k_size, v_size)
        # torch's packed layout holds [3E, E]; other shapes (GQA, own head sizes) cannot fit it.
        self.packed = self.kdim == self.vdim == embed_dim == q_size == k_size == v_size
        if self.packed:
            self.in_proj_weight = empty(3 * embed_dim, embed_dim)
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = empty(q_size, embed_dim)
            self.k_proj_weight = empty(k_size, self.kdim)
            self.v_proj_weight = empty(v_size, self.vdim)
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = empty(q_size + k_size + v_size)
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = nn.Linear(
            num_heads * self.head_dim_v, embed_dim, bias=bias, device=device, dtype=dtype
        )
        if add_bias_kv:
            self.bias_k, self.bias_v = empty(1, 1, k_size), empty(1, 1, v_size)
        else:
            self.register_parameter("bias_k", None)
            self.register_parameter("bias_v", None)

        self.score = build_head_scores(score, num_heads, self.head_dim_k)
        self.align = build_align(align, self.head_dim_k, self.head_dim_k)
        for built, spec in ((self.score, score), (self.align, align)):
            if not isinstance(spec, nn.Module):  # objects stay where the user put them
                built.to(device=device, dtype=dtype)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """torch's initialisation: Xavier-uniform projections, zero biases, Xavier-normal
        ``bias_k``/``bias_v`` (``out_proj.weight`` keeps ``nn.Linear``'s)."""
        for w in (self.in_proj_weight, self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
            if w is not None:  # the packed matrix as a whole, as torch does
                nn.init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            nn.init.zeros_(self.in_proj_bias)
            nn.init.zeros_(self.out_proj.bias)
        for b in (self.bias_k, self.bias_v):
            if b is not None:
                nn.init.xavier_normal_(b)

    @property
    def _qkv_same_embed_dim(self) -> bool:
        """torch's flag, read by ``nn.TransformerEncoderLayer``: when True, its eval fast path
        runs torch's fused kernel on ``in_proj_weight`` instead of calling this module. So it is
        True only when that kernel computes what this module computes (packed, scaled dot
        product, softmax, exact)."""
        return (
            self.packed
            and type(self.score) is ScaledDot
            and type(self.align) is Softmax
            and self.attention == "exact"
        )

    @property
    def attention(self) -> str:
        """The name of the attention kind this module runs (``"exact"``, ``"linformer"``, …)."""
        return self._attention_name

    @property
    def attention_kind(self) -> AttentionKind:
        """The kind object this module runs now between its projections and ``out_proj``: its
        own, or exact attention inside ``attnkit.layers.exact_kinds`` (a scope of this context,
        see :mod:`attnkit.core.hooks`)."""
        return EXACT if runs_exact(self) else self._attend

    @property
    def forms_weights(self) -> bool:
        """Whether this module attends through :func:`attnkit.attention`, so its attention
        weights exist to be recorded (``interpret.record``) or replaced (``evaluate.ablate``).
        An efficient kind (``attention="linear"``, ...) forms none, except while
        ``attnkit.layers.exact_kinds`` runs it as exact attention."""
        return bool(self.attention_kind.forms_weights)

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
            f"num_kv_heads={self.num_kv_heads}, head_dim_k={self.head_dim_k}, "
            f"head_dim_v={self.head_dim_v}, kdim={self.kdim}, vdim={self.vdim}, "
            f"dropout={self.dropout}, batch_first={self.batch_first}, "
            f"add_zero_attn={self.add_zero_attn}, attention={self.attention!r}"
        )

    def _heads(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Eq. (38) for every head, in the engine's layout: ``q [B, H, M, D]``,
        ``k [B, G, N', D]``, ``v [B, G, N', Dv]`` (``N'`` counts ``bias_k`` and the zero key
        when enabled)."""
        n = query.shape[0]
        q, k, v = self._project(query, key, value)
        if self.bias_k is not None and self.bias_v is not None:
            k = torch.cat([k, self.bias_k.expand(n, 1, -1)], 1)
            v = torch.cat([v, self.bias_v.expand(n, 1, -1)], 1)
        q = q.unflatten(-1, (self.num_heads, self.head_dim_k)).transpose(1, 2)
        k = k.unflatten(-1, (self.num_kv_heads, self.head_dim_k)).transpose(1, 2)
        v = v.unflatten(-1, (self.num_kv_heads, self.head_dim_v)).transpose(1, 2)
        if self.add_zero_attn:
            k = torch.cat([k, k.new_zeros(*k.shape[:2], 1, k.shape[-1])], 2)
            v = torch.cat([v, v.new_zeros(*v.shape[:2], 1, v.shape[-1])], 2)
        return q, k, v

    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Eq. (38) for all heads at once: ``[B, M, H·D]``, ``[B, N, G·D]``, ``[B, N, G·Dv]``."""
        q_size, k_size, v_size = self._sizes
        b = self.in_proj_bias
        b_q, b_k, b_v = (None,) * 3 if b is None else b.split(self._sizes)
        w = self.in_proj_weight
        if w is None:
            w_q, w_k, w_v = (
                cast(Tensor, t)
                for t in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
            )
            return F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)
        if query is key and key is value:  # self-attention: one matrix product, as torch does
            q, k, v = F.linear(query, w, b).split(self._sizes, dim=-1)
            return q, k, v
        w_q, w_k, w_v = w.split(self._sizes)
        if key is value:
            k, v = F.linear(key, w[q_size:], None if b is None else b[q_size:]).split(
                (k_size, v_size), dim=-1
            )
            return F.linear(query, w_q, b_q), k, v
        return F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
        *,
        weights_after_dropout: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend ``key``/``value`` with ``query`` in every head and combine (eq. 38-40).

        Args:
            query: ``[M, B, E]`` (``[B, M, E]`` with ``batch_first``) or unbatched ``[M, E]``.
            key: ``[N, B, kdim]`` (``[B, N, kdim]``) or ``[N, kdim]``.
            value: ``[N, B, vdim]`` (``[B, N, vdim]``) or ``[N, vdim]``.
            key_padding_mask: ``[B, N]`` (``[N]`` unbatched); bool with ``True`` = padding,
                IGNORED (torch's convention, the opposite of attnkit's), or float, added to the
                scores (``-inf`` removes a key).
            need_weights: also return the attention weights.
            attn_mask: ``[M, N]`` or ``[B·H, M, N]`` (``[H, M, N]`` unbatched); bool with
                ``True`` = NOT allowed (torch's), or float, added to the scores.
            average_attn_weights: return the weights averaged over heads ``[B, M, N]``, else
                per head ``[B, H, M, N]``.
            is_causal: a hint that ``attn_mask`` is the causal mask (the mask is applied as
                given); without ``attn_mask``, a causal mask (bottom-right: query ``i`` sees keys
                ``j <= i + N - M``, top-left = bottom-right when ``M == N``).
            weights_after_dropout: in training mode with ``dropout > 0``, return the weights
                after dropout (zeroed and rescaled: the ones that multiplied the values), as
                torch does; ``False``: before dropout (e.g. an alignment to read or supervise).

        Nested tensors: ``query``, ``key``, ``value`` may be nested batches (``torch.nested``,
        strided or jagged, ``batch_first`` only) of sequences ``[M_i, E]`` (query) and
        ``[N_i, kdim]`` (key, value); the output is nested like ``query`` and the weights are
        padded ``[B, max M_i, max N_i]``, zero past each sequence's end (torch's fast path).
        ``key_padding_mask`` and ``attn_mask`` are refused with them (the nesting says what is
        padding); ``is_causal`` needs ``key is query``.

        Returns:
            ``(attn_output, attn_weights)``: ``attn_output`` shaped like ``query`` with ``E``
            features (eq. 40); ``attn_weights`` as above (``N`` counts ``bias_k`` and the zero
            key when enabled; without the ``B`` axis unbatched), or ``None`` if not
            ``need_weights``.
        """
        if any(isinstance(t, Tensor) and t.is_nested for t in (query, key, value)):
            return self._forward_nested(
                query, key, value, key_padding_mask, need_weights, attn_mask,
                average_attn_weights, is_causal, weights_after_dropout,
            )  # fmt: skip
        expected = self.out_proj.weight.dtype  # the projections' dtype (autocast casts itself)
        for name, t in (("query", query), ("key", key), ("value", value)):
            if isinstance(t, Tensor) and (
                not t.is_floating_point()
                or (t.dtype != expected and not torch.is_autocast_enabled(t.device.type))
            ):
                raise TypeError(f"{name} must have this module's dtype {expected}, got {t.dtype}")
        query, key, value, batched = self._batch_first(query, key, value)
        n, length, _ = query.shape
        src = key.shape[1]
        allowed, bias = self._masks(key_padding_mask, attn_mask, n, length, src, query, batched)
        causal = bool(is_causal) and attn_mask is None
        extra = int(self.bias_k is not None) + int(self.add_zero_attn)
        if causal and extra:  # the appended keys stay visible to every query, as torch's padding
            tri = causal_mask(length, src, query.device)
            allowed = tri if allowed is None else allowed & tri
            causal = False

        dropout = self.dropout if self.training else 0.0
        mask = engine_mask(allowed, bias, extra)
        blocks = None
        if need_weights and average_attn_weights and dropout == 0:
            blocks = self._mean_blocks(n, length, src + extra)
        if blocks is not None:
            context, weights = self._attend_averaged(
                *self._heads(query, key, value), mask, causal, blocks
            )
        else:
            # only asked when it changes the weights: kinds other than exact take no such option
            asked = need_weights and weights_after_dropout and dropout > 0
            dropped = {"weights_after_dropout": True} if asked else {}
            # eq. (38) and (39), every head at once; no name holds q, k, v, so without autograd
            # the projections are freed as soon as the engine returns, before the weights' mean
            attended = self.attention_kind(
                *self._heads(query, key, value),
                score=self.score,
                align=self.align,
                mask=mask,
                causal=causal,
                dropout=dropout,
                return_weights=need_weights,
                **dropped,
            )
            context = attended.context  # [B, H, M, Dv]
            weights = attended.weights if need_weights else None
            del attended  # no other reference: the per-head weights are freed by their mean
            if weights is not None and average_attn_weights:
                # before the output is formed, so the [B, H, M, N] weights and the [B, M, E]
                # context copies are never held at once (torch's peak: q, k, v, the weights,
                # their mean and one [B, M, E] tensor)
                weights = weights.mean(1)
        if not batched:
            context = context.transpose(1, 2).flatten(2)  # concat over heads: [B, M, H·Dv]
            output = self.out_proj(context)  # eq. (40)
        else:
            # torch's layout: [M, B, H·Dv] in memory, a transposed view when batch-first, so a
            # dropout that follows (the layers' dropout1) draws the same mask as after torch's
            context = context.permute(2, 0, 1, 3).flatten(2)
            output = self.out_proj(context)  # eq. (40)
            output = output.transpose(0, 1) if self.batch_first else output
        if not batched:
            output = output.squeeze(0)
            weights = None if weights is None else weights.squeeze(0)
        return output, weights

    def _mean_blocks(self, batch: int, m: int, n: int) -> tuple[int, int] | None:
        """``(batch rows, key/value heads)`` per engine call when the weights averaged over heads
        are computed in blocks (:meth:`_attend_averaged`), or ``None`` for one call.

        In blocks only when nothing needs the per-head weights of one call: no autograd graph,
        no hook watching the calls (a hook sees one call per forward), exact attention with the
        softmax (deterministic, row by row) and one score for every head; and only when the
        ``[B, H, M, N]`` weights exceed two blocks (:data:`WEIGHTS_BLOCK`; smaller ones are
        one call, whose overhead is the smaller)."""
        if torch.is_grad_enabled() or observed() or self.attention_kind is not EXACT:
            return None
        if type(self.align) is not Softmax or isinstance(self.score, HeadwiseScore):
            return None
        item = torch.promote_types(self.out_proj.weight.dtype, torch.float32).itemsize
        per_group = self.num_heads // self.num_kv_heads * m * n * item  # one row, one K/V head
        if per_group == 0 or batch * self.num_kv_heads * per_group <= 2 * WEIGHTS_BLOCK:
            return None
        groups = max(1, min(self.num_kv_heads, WEIGHTS_BLOCK // per_group))
        rows = max(1, WEIGHTS_BLOCK // (groups * per_group)) if groups == self.num_kv_heads else 1
        return rows, groups

    def _attend_averaged(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None,
        causal: bool,
        blocks: tuple[int, int],
    ) -> tuple[Tensor, Tensor]:
        """Eq. (39) and the weights averaged over heads, ``(context [B, H, M, Dv], mean
        [B, M, N])``, one engine call per block of ``blocks = (batch rows, key/value heads)``
        (:meth:`_mean_blocks`), so that only one block of the per-head weights exists at a time.

        The same results as one call: each query row of each head is attended alone (softmax),
        and the mean adds the heads in order, as ``weights.mean(1)`` does. The context is
        written in the layout ``out_proj`` reads (``[M, B, H, Dv]`` in memory)."""
        b, h, m, _ = q.shape
        g, n = k.shape[1], k.shape[2]
        per_group = h // g  # query heads per key/value head
        rows, groups = blocks
        mean = q.new_empty(b, m, n, dtype=torch.promote_types(q.dtype, torch.float32))
        context = q.new_empty(m, b, h, v.shape[-1]).permute(1, 2, 0, 3)
        for b0 in range(0, b, rows):
            for g0 in range(0, g, groups):
                at_b, at_g = slice(b0, b0 + rows), slice(g0, g0 + groups)
                at_h = slice(g0 * per_group, (g0 + groups) * per_group)
                part = mask
                if mask is not None:  # [B|1, H|1, M, N]: the block's rows and heads
                    part = mask[at_b if mask.shape[0] > 1 else slice(None)]
                    part = part[:, at_h] if mask.shape[1] > 1 else part
                out = self.attention_kind(
                    q[at_b, at_h],
                    k[at_b, at_g],
                    v[at_b, at_g],
                    score=self.score,
                    align=self.align,
                    mask=part,
                    causal=causal,
                    return_weights=True,
                )
                context[at_b, at_h] = out.context
                total = mean[at_b]
                assert out.weights is not None
                for j, weights in enumerate(out.weights.unbind(1)):
                    if g0 == 0 and j == 0:
                        total.copy_(weights)
                    else:
                        total.add_(weights)
        return context, mean.div_(h).to(q.dtype)

    def _forward_nested(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None,
        need_weights: bool,
        attn_mask: Tensor | None,
        average_attn_weights: bool,
        is_causal: bool,
        weights_after_dropout: bool,
    ) -> tuple[Tensor, Tensor | None]:
        """:meth:`forward` of nested batches: padded, the padded keys masked out, and the
        output cut back to each query sequence's length (see ``attnkit.mechanisms.nested``)."""
        if not all(t.is_nested for t in (query, key, value)):
            raise TypeError("query, key and value must all be nested tensors, or none of them")
        if not self.batch_first:
            raise ValueError("nested tensors need batch_first=True (a nested batch is [B, M_i, E])")
        if key_padding_mask is not None or attn_mask is not None:
            raise ValueError(
                "nested inputs take no key_padding_mask or attn_mask: their lengths say which "
                "positions exist (pad them yourself to pass masks)"
            )
        if is_causal and key is not query:
            raise ValueError("is_causal with nested inputs needs self-attention (key is query)")
        queries = pad_nested(query, "query")
        keys = queries if key is query else pad_nested(key, "key")
        values = keys if value is key else pad_nested(value, "value")
        if keys.lengths != values.lengths or len(queries.lengths) != len(keys.lengths):
            raise ValueError(
                f"key and value must hold sequences of the same lengths, and query as many: got "
                f"{queries.lengths}, {keys.lengths}, {values.lengths}"
            )
        q = queries.values
        k = q if keys is queries else keys.values
        v = k if values is keys else values.values
        out, weights = self(
            q, k, v,
            key_padding_mask=keys.padding,
            need_weights=need_weights,
            average_attn_weights=average_attn_weights,
            is_causal=is_causal,
            weights_after_dropout=weights_after_dropout,
        )  # fmt: skip
        if weights is not None:  # torch's fast path: no weight at a query past the end
            real = ~queries.padding  # [B, M]
            weights = weights * (real[:, None, :, None] if weights.dim() == 4 else real[..., None])
        return queries.nested(out), weights

    def merge_masks(
        self, attn_mask: Tensor | None, key_padding_mask: Tensor | None, query: Tensor
    ) -> tuple[Tensor | None, int | None]:
        """torch's ``merge_masks``: ``(merged_mask, mask_type)`` from ``attn_mask [M, M]`` or
        ``[B·H, M, M]`` and ``key_padding_mask [B, M]`` in torch's conventions (see
        :func:`attnkit.mechanisms.torch_masks.merge_masks`; ``query [B, M, E]``)."""
        return merge_masks(self.num_heads, attn_mask, key_padding_mask, query)

    def _batch_first(
        self, query: Tensor, key: Tensor, value: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, bool]:
        """Check the inputs and return them ``[B, M, ·]``, plus whether they were batched."""
        for name, t in (("query", query), ("key", key), ("value", value)):
            if not isinstance(t, Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if query.dim() not in (2, 3) or key.dim() != query.dim() or value.dim() != query.dim():
            raise ValueError(
                "query, key, value must all be 3-D (batched) or all 2-D (unbatched), got shapes "
                f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
            )
        for name, t, size in (
            ("query", query, self.embed_dim),
            ("key", key, self.kdim),
            ("value", value, self.vdim),
        ):
            if t.shape[-1] != size:
                raise ValueError(
                    f"{name} must have {size} features (last dim), got shape {tuple(t.shape)}"
                )
        batched = query.dim() == 3
        given = f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
        if not batched:
            query, key, value = _reshaped(lambda x: x.unsqueeze(0), query, key, value)
        elif not self.batch_first:
            query, key, value = _reshaped(lambda x: x.transpose(0, 1), query, key, value)
        if not (query.shape[0] == key.shape[0] == value.shape[0]) or key.shape[1] != value.shape[1]:
            layout = "[M, E]" if not batched else "[B, M, E]" if self.batch_first else "[M, B, E]"
            raise ValueError(
                f"query, key, value (each {layout}) must share the batch size, and key and value "
                f"the length, got {given}"
            )
        return query, key, value, batched

    def _masks(
        self,
        key_padding_mask: Tensor | None,
        attn_mask: Tensor | None,
        n: int,
        length: int,
        src: int,
        query: Tensor,
        batched: bool,
    ) -> tuple[Tensor | None, Tensor | None]:
        """torch's masks as ``(allowed, bias)``, 4-D, broadcastable to ``[B, H, M, N]``:
        ``allowed`` bool (True = may attend), ``bias`` float (added to the scores)."""
        allowed, bias = None, None
        h = self.num_heads
        if key_padding_mask is not None:
            expected = (n, src) if batched else (src,)
            m = check_torch_mask("key_padding_mask", key_padding_mask, [expected], query)
            a, b = split_torch_mask(m.reshape(n, 1, 1, src), query.dtype)
            allowed, bias = and_allowed(allowed, a), add_bias(bias, b)
        if attn_mask is not None:
            heads = (n * h, length, src) if batched else (h, length, src)
            m = check_torch_mask("attn_mask", attn_mask, [(length, src), heads], query)
            m = m.reshape(1, 1, length, src) if m.dim() == 2 else m.reshape(n, h, length, src)
            a, b = split_torch_mask(m, query.dtype)
            allowed, bias = and_allowed(allowed, a), add_bias(bias, b)
        return allowed, bias


def _reshaped(
    fn: Callable[[Tensor], Tensor], query: Tensor, key: Tensor, value: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """``fn`` of each input; inputs that were one object stay one object, so self-attention
    (``query is key is value``) is still recognised for the one-product projection."""
    q = fn(query)
    k = q if key is query else fn(key)
    v = k if value is key else q if value is query else fn(value)
    return q, k, v
