"""Autoregressive decoding: greedy, temperature / top-k / top-p sampling, and beam search.

Every strategy drives a *step function* ``step(tokens [B, T], caches) -> logits [B, T, V]``:

- with caches (a list of per-layer caches with ``reorder``), ``tokens`` are the next tokens only
  and the caches are updated in place: one new token costs ``O(length)`` attention;
- without (``caches=None``), ``tokens`` are the whole sequence so far, recomputed every step:
  ``O(length²)`` per token. Both give the same tokens (tested).

Decoder-only: ``step = lambda t, c: lm(t, caches=c)`` with ``caches = lm.new_caches(C)``.
Encoder–decoder: encode once, then ``step = lambda t, c: head(model.decode(emb(t), memory,
caches=c))`` (memory keys/values are cached on the first step); see :func:`seq2seq_step`.

References: beam search with length normalisation ``score = log p(y) / |y|^α`` (Wu et al. 2016,
GNMT §7, simplified); nucleus (top-p) sampling (Holtzman et al. 2020).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

Step = Callable[[Tensor, Any], Tensor]


def _reorder(caches: Sequence[Any] | None, index: Tensor) -> None:
    if caches is not None:
        for cache in caches:
            cache.reorder(index)


def _last_logits(logits: Tensor, lengths: Tensor | None) -> Tensor:
    """Logits after each row's last real token: ``[B, V]``."""
    if lengths is None:
        return logits[:, -1]
    return logits[torch.arange(logits.shape[0], device=logits.device), lengths - 1]


def _generate(
    step: Step,
    prompt: Tensor,
    max_new_tokens: int,
    caches: Sequence[Any] | None,
    choose: Callable[[Tensor], Tensor],
    lengths: Tensor | None,
    eos_token_id: int | None,
) -> Tensor:
    if prompt.dim() != 2 or prompt.shape[1] == 0:
        raise ValueError(f"prompt must be [B, L] with L >= 1, got {tuple(prompt.shape)}")
    if lengths is not None and caches is None:
        raise ValueError("ragged prompts (lengths=) need caches")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    n = prompt.shape[0]
    out = []
    done = torch.zeros(n, dtype=torch.bool, device=prompt.device)
    sequence = prompt
    with torch.no_grad():
        logits = (
            step(prompt, caches)
            if lengths is None
            else _prefill_ragged(step, prompt, caches, lengths)
        )
        for i in range(max_new_tokens):
            token = choose(_last_logits(logits, lengths if i == 0 else None))  # [B]
            if eos_token_id is not None:
                token = torch.where(done, torch.full_like(token, eos_token_id), token)
                done = done | (token == eos_token_id)
            out.append(token)
            if i + 1 == max_new_tokens or bool(done.all()):
                break
            if caches is None:
                sequence = torch.cat([sequence, token[:, None]], 1)
                logits = step(sequence, None)
            else:
                logits = step(token[:, None], caches)
    if not out:
        return prompt.new_zeros(n, 0)
    return torch.stack(out, 1)


def _prefill_ragged(
    step: Step, prompt: Tensor, caches: Sequence[Any] | None, lengths: Tensor
) -> Tensor:
    """Prefill right-padded prompts: ``step`` must accept ``lengths=`` (e.g. a
    :class:`~attnkit.layers.language_model.CausalLanguageModel` wrapped as
    ``lambda t, c, **kw: lm(t, caches=c, **kw)``)."""
    return step(prompt, caches, lengths=lengths)  # type: ignore[call-arg]


def greedy(
    step: Step,
    prompt: Tensor,
    max_new_tokens: int,
    caches: Sequence[Any] | None = None,
    *,
    lengths: Tensor | None = None,
    eos_token_id: int | None = None,
) -> Tensor:
    """The most probable next token, step after step.

    Args:
        step: see the module docstring.
        prompt: ``[B, L]`` token ids (right-padded when ``lengths`` is given).
        max_new_tokens: tokens to generate.
        caches: per-layer caches (empty), or ``None`` to recompute the whole sequence each step.
        lengths: ``[B]`` real prompt tokens per row (needs caches).
        eos_token_id: rows that produced it keep producing it; stops when every row has.

    Returns:
        ``[B, T]`` generated tokens (``T <= max_new_tokens``).
    """
    return _generate(
        step, prompt, max_new_tokens, caches, lambda s: s.argmax(-1), lengths, eos_token_id
    )


def filter_logits(logits: Tensor, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """Keep the ``top_k`` largest logits and the smallest set whose probability reaches
    ``top_p`` (nucleus), setting the rest to ``-inf``: ``[B, V] → [B, V]``."""
    if top_k is not None:
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        kth = logits.topk(min(top_k, logits.shape[-1]), -1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        sorted_logits, order = logits.sort(-1, descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        # drop a token when the tokens before it already reach top_p (the first always stays)
        drop_sorted = (cumulative - sorted_logits.softmax(-1)) >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample(
    step: Step,
    prompt: Tensor,
    max_new_tokens: int,
    caches: Sequence[Any] | None = None,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    lengths: Tensor | None = None,
    eos_token_id: int | None = None,
) -> Tensor:
    """Sample each next token from ``softmax(filter(logits) / temperature)``.

    ``temperature`` → 0 approaches greedy; ``top_k`` / ``top_p`` restrict the candidates
    (:func:`filter_logits`). Arguments otherwise as :func:`greedy`.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 (use greedy for 0), got {temperature}")

    def choose(logits: Tensor) -> Tensor:
        probs = filter_logits(logits / temperature, top_k, top_p).softmax(-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)

    return _generate(step, prompt, max_new_tokens, caches, choose, lengths, eos_token_id)


def beam_search(
    step: Step,
    prompt: Tensor,
    max_new_tokens: int,
    beam_size: int,
    caches: Sequence[Any] | None = None,
    *,
    length_penalty: float = 1.0,
    eos_token_id: int | None = None,
    early_stopping: bool = True,
) -> tuple[Tensor, Tensor]:
    """Beam search with length-normalised scores ``log p(y | prompt) / |y|^length_penalty``.

    Keeps the ``beam_size`` best unfinished continuations per row; a continuation ending in
    ``eos_token_id`` becomes a finished hypothesis (the ``beam_size`` best are kept). With
    ``early_stopping`` a row stops as soon as it has ``beam_size`` finished hypotheses; else it
    runs ``max_new_tokens`` steps. Unfinished beams at the end count as hypotheses too.

    Args:
        step, prompt, max_new_tokens, caches: as :func:`greedy` (caches sized for
            ``N · beam_size`` rows; each row's beams are consecutive).
        beam_size: ``K``.

    Returns:
        ``(tokens [B, T], scores [B])``: the best hypothesis per row (padded with
        ``eos_token_id``, or 0, after its end) and its normalised score.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    if prompt.dim() != 2 or prompt.shape[1] == 0:
        raise ValueError(f"prompt must be [B, L] with L >= 1, got {tuple(prompt.shape)}")
    n, k, device = prompt.shape[0], beam_size, prompt.device
    pad = 0 if eos_token_id is None else eos_token_id
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(n)]
    row_done = [False] * n
    beams = torch.empty(n * k, 0, dtype=torch.long, device=device)  # generated tokens
    scores = torch.full((n, k), float("-inf"), device=device)
    scores[:, 0] = 0.0  # identical beams at the start: only the first is live

    def normalised(logp: float, length: int) -> float:
        return logp / max(length, 1) ** length_penalty

    def offer(row: int, logp: float, tokens: list[int]) -> None:
        finished[row].append((normalised(logp, len(tokens)), tokens))
        finished[row].sort(key=lambda h: -h[0])
        del finished[row][k:]

    with torch.no_grad():
        sequence = prompt.repeat_interleave(k, 0)
        logits = step(sequence, caches)
        for t in range(max_new_tokens):
            logp = logits[:, -1].float().log_softmax(-1)  # [B·K, V]
            vocab = logp.shape[-1]
            candidates = (scores[:, :, None] + logp.view(n, k, vocab)).view(n, k * vocab)
            top_scores, top_ids = candidates.topk(min(2 * k, k * vocab), -1)  # [B, 2K]
            new_scores = torch.full((n, k), float("-inf"), device=device)
            parents = torch.zeros(n, k, dtype=torch.long, device=device)
            tokens = torch.full((n, k), pad, dtype=torch.long, device=device)
            for row in range(n):
                if row_done[row]:
                    continue
                filled = 0
                for score, index in zip(
                    top_scores[row].tolist(), top_ids[row].tolist(), strict=True
                ):
                    if score == float("-inf"):
                        break
                    parent, token = divmod(index, vocab)
                    history = beams[row * k + parent].tolist()
                    if eos_token_id is not None and token == eos_token_id:
                        offer(row, score, [*history, token])
                        continue
                    new_scores[row, filled], parents[row, filled] = score, parent
                    tokens[row, filled] = token
                    filled += 1
                    if filled == k:
                        break
                if early_stopping and len(finished[row]) == k:
                    row_done[row] = True
            index = (torch.arange(n, device=device)[:, None] * k + parents).view(-1)
            beams = torch.cat([beams[index], tokens.view(-1, 1)], 1)
            scores = new_scores
            if all(row_done) or t + 1 == max_new_tokens:
                break
            _reorder(caches, index)
            if caches is None:
                sequence = torch.cat([sequence[index], tokens.view(-1, 1)], 1)
                logits = step(sequence, None)
            else:
                logits = step(tokens.view(-1, 1), caches)
    for row in range(n):  # unfinished beams are hypotheses too
        if row_done[row]:
            continue
        for j in range(k):
            if scores[row, j] > float("-inf"):
                offer(row, float(scores[row, j]), beams[row * k + j].tolist())
    best = [finished[row][0] if finished[row] else (float("-inf"), []) for row in range(n)]
    length = max(len(h[1]) for h in best)
    out = torch.full((n, length), pad, dtype=torch.long, device=device)
    for row, (_, hyp) in enumerate(best):
        out[row, : len(hyp)] = torch.tensor(hyp, dtype=torch.long)
    return out, torch.tensor([h[0] for h in best])


def seq2seq_step(
    model: Any,
    embed: Callable[[Tensor], Tensor],
    head: Callable[[Tensor], Tensor],
    memory: Tensor,
    memory_key_padding_mask: Tensor | None = None,
) -> Step:
    """A step function for an encoder–decoder :class:`~attnkit.layers.Transformer`
    (``batch_first=True``): ``head(model.decode(embed(tokens), memory, caches=caches))``.

    ``memory [B, S, E]`` must already be repeated per beam for beam search
    (``memory.repeat_interleave(K, 0)``). Without caches the decoder runs causally over the whole
    target so far.
    """

    def step(tokens: Tensor, caches: Any) -> Tensor:
        if tokens.shape[0] != memory.shape[0]:
            raise ValueError(
                f"tokens have {tokens.shape[0]} rows but memory {memory.shape[0]} (repeat the "
                "memory per beam)"
            )
        pad = memory_key_padding_mask
        if caches is None:
            h = model.decode(embed(tokens), memory, memory_key_padding_mask=pad, tgt_is_causal=True)
        else:
            h = model.decode(embed(tokens), memory, memory_key_padding_mask=pad, caches=caches)
        return head(h)

    return step
