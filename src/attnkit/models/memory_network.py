"""End-to-end memory network, MemN2N (Sukhbaatar et al. 2015, "End-To-End Memory Networks").

Multi-hop attention over a memory of sentences (survey §3.3.2, multi-hop; the question-answering
model of Fig. 10's family). With ``x_i`` the memory sentences and ``q`` the question::

    m_i = Σ_j l_j ∘ A^k x_ij + T_A^k(i)        memory (key) vectors of hop k          (§2.1, §4.1)
    c_i = Σ_j l_j ∘ C^k x_ij + T_C^k(i)        output (value) vectors of hop k
    u^1 = Σ_j l_j ∘ B q_j                      the question
    p^k = softmax_i(u^k·m_i),  o^k = Σ_i p^k_i c_i                                    (eq. 1-2)
    u^{k+1} = u^k + o^k                                                                (§2.2)
    â = softmax(W u^{K+1})                                                             (eq. 3)

Adjacent weight tying (§2.2): ``A^{k+1} = C^k``, ``B = A^1``, ``W^T = C^K``; so ``K + 1``
embedding matrices (and, the same way, ``K + 1`` temporal tables) serve ``K`` hops. ``W`` is
restricted to the rows of the possible answers (the location words), so the final softmax is over
the vocabulary of answers. Sentence embeddings are a bag of words (``l_j = 1``) or the position
encoding ``l_kj = (1 - j/J) - (k/d)(1 - 2j/J)`` (§4.1; ``J`` words, ``d`` dimensions, 1-based).
Temporal encoding ``T(i)`` is a learned vector per memory slot, slot 0 the most recent sentence.

Each hop is one call of :func:`attnkit.attention` (query ``u^k``, keys ``m``, values ``c``, dot
score, softmax), so ``attnkit.evaluate.ablate`` and ``attnkit.interpret.record`` see every hop.
:class:`attnkit.mechanisms.MultiHopAttention` does not fit MemN2N: it computes the keys and values
once for all hops (MemN2N has its own ``A^k``, ``C^k`` per hop) and scores
``concat(q^(s+1), c^(s))`` (survey eq. 42), where MemN2N scores ``u^k`` alone and adds the context
to it (``u^{k+1} = u^k + o^k``).

Shapes: B questions, M memory slots, L words per sentence, L_q question words, d embedding size,
K hops, C answers, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

import torch
from torch import Tensor, nn

from attnkit.core.engine import attention

SentenceEncoding = Literal["bag_of_words", "position"]


@dataclass(frozen=True)
class MemoryNetworkOutput:
    """What :meth:`EndToEndMemoryNetwork.read` returns.

    Attributes:
        logits: ``W u^{K+1}`` over the answers, ``[B, C]``.
        weights: each hop's attention ``p^k`` over the memory slots, ``[B, K, M]``.
        states: the controller states ``u^1 … u^{K+1}``, ``[B, K + 1, d]``.
    """

    logits: Tensor
    weights: Tensor
    states: Tensor


def position_encoding(
    lengths: Tensor, max_length: int, dim: int, dtype: torch.dtype = torch.float32
) -> Tensor:
    """MemN2N's position encoding ``l_kj = (1 - j/J) - (k/d)(1 - 2j/J)`` (§4.1), ``[..., L, d]``.

    Args:
        lengths: ``J`` of each sentence, ``[...]`` (long); rows beyond ``J`` are zero.
        max_length: ``L``.
        dim: ``d``.
        dtype: of the result.
    """
    j = torch.arange(1, max_length + 1, device=lengths.device, dtype=dtype)  # [L]
    k = torch.arange(1, dim + 1, device=lengths.device, dtype=dtype)  # [d]
    big_j = lengths.clamp_min(1).to(dtype)[..., None, None]  # [..., 1, 1]
    jj = j[:, None] / big_j  # [..., L, 1]
    encoding = (1 - jj) - (k / dim) * (1 - 2 * jj)  # [..., L, d]
    real = j[:, None] <= lengths[..., None, None]
    return encoding * real


class MemoryHop(nn.Module):
    """One hop of MemN2N: ``p = softmax_i(u·m_i)``, ``o = Σ_i p_i c_i``, ``u' = u + o`` (eq. 1-2).

    It holds no parameters (the embeddings are tied across hops and live in the network); it is a
    module so each hop is a named module (``hop_modules.0``, ``hop_modules.1``, …) that
    ``interpret.record`` and ``evaluate.ablate`` can select, whichever method of the network runs
    it.
    """

    def forward(
        self, u: Tensor, keys: Tensor, values: Tensor, mask: Tensor, dropout: float = 0.0
    ) -> tuple[Tensor, Tensor]:
        """``(u^{k+1} [B, d], p^k [B, M])`` from ``u^k [B, d]``, memory vectors ``keys [B, M, d]``
        and ``values [B, M, d]``, ``mask [B, M]`` (True = a real memory)."""
        out = attention(
            u[:, None, :],  # [B, 1, d]
            keys,
            values,
            score="dot",  # u^T m_i (eq. 1)
            mask=mask[:, None, :],  # [B, 1, M]
            dropout=dropout,
            return_weights=True,
        )
        assert out.weights is not None
        return u + out.context[:, 0], out.weights[:, 0]  # u^{k+1} = u^k + o^k


class EndToEndMemoryNetwork(nn.Module):
    """MemN2N with adjacent weight tying (see the module docstring for the equations).

    Args:
        vocab_size: ``V``; id 0 is padding (its embedding stays zero).
        answer_ids: the vocabulary ids of the answers, ``[C]`` long; logit ``c`` is answer ``c``.
        embed_dim: ``d``.
        hops: ``K``.
        memory_size: ``M``, slots of temporal encoding (the most recent ``M`` sentences).
        sentence_encoding: ``"bag_of_words"`` or ``"position"``.
        temporal_encoding: add the learned ``T_A(i)``, ``T_C(i)``.
        dropout: on the attention weights, in training mode only.
        init_std: std of the normal initialisation of the embeddings (the paper: 0.1).

    Example::

        >>> net = EndToEndMemoryNetwork(20, torch.tensor([5, 6, 7]), embed_dim=16, hops=3)
        >>> memories = torch.randint(1, 20, (2, 4, 5))
        >>> net(memories, torch.ones(2, 4, dtype=torch.bool), torch.randint(1, 20, (2, 3))).shape
        torch.Size([2, 3])
    """

    answer_ids: Tensor

    def __init__(
        self,
        vocab_size: int,
        answer_ids: Tensor,
        embed_dim: int = 32,
        hops: int = 3,
        memory_size: int = 50,
        sentence_encoding: SentenceEncoding = "position",
        temporal_encoding: bool = True,
        dropout: float = 0.0,
        init_std: float = 0.1,
    ) -> None:
        super().__init__()
        for name, value in (
            ("vocab_size", vocab_size),
            ("embed_dim", embed_dim),
            ("hops", hops),
            ("memory_size", memory_size),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if sentence_encoding not in ("bag_of_words", "position"):
            raise ValueError(
                f"sentence_encoding must be 'bag_of_words' or 'position', got {sentence_encoding!r}"
            )
        if answer_ids.dim() != 1 or answer_ids.dtype != torch.long or not len(answer_ids):
            raise ValueError(
                f"answer_ids must be a non-empty long tensor [C], got {answer_ids.dtype} "
                f"{tuple(answer_ids.shape)}"
            )
        if answer_ids.min() < 1 or answer_ids.max() >= vocab_size:
            raise ValueError(f"answer_ids must be vocabulary ids in [1, {vocab_size})")
        self.embed_dim, self.hops, self.memory_size = embed_dim, hops, memory_size
        self.sentence_encoding, self.dropout = sentence_encoding, dropout
        self.register_buffer("answer_ids", answer_ids.clone())
        # embeddings[0] = A^1 = B, embeddings[k] = C^k = A^{k+1}, embeddings[K] = C^K = W^T
        tables = [nn.Embedding(vocab_size, embed_dim, padding_idx=0) for _ in range(hops + 1)]
        for table in tables:
            nn.init.normal_(table.weight, std=init_std)
            with torch.no_grad():
                table.weight[0].zero_()
        self.embeddings = nn.ModuleList(tables)
        # temporal[k] = T_A^{k+1} = T_C^k, tied like the word embeddings
        self.temporal = (
            nn.Parameter(torch.randn(hops + 1, memory_size, embed_dim) * init_std)
            if temporal_encoding
            else None
        )
        self.hop_modules = nn.ModuleList(MemoryHop() for _ in range(hops))
        self.taxonomy = {"query_multiplicity": "Multi-Hop", "scoring": "Dot-Product"}

    def _embed(self, table: int, words: Tensor) -> Tensor:
        """``Σ_j l_j ∘ E x_j`` of sentences ``words [..., L]`` with embedding ``table``,
        ``[..., d]``."""
        vectors = self.embeddings[table](words)  # [..., L, d]; padding rows are zero
        if self.sentence_encoding == "position":
            lengths = (words != 0).sum(-1)
            encoding = position_encoding(lengths, words.shape[-1], self.embed_dim, vectors.dtype)
            vectors = vectors * encoding
        return vectors.sum(-2)

    def _memory(self, table: int, memories: Tensor) -> Tensor:
        """Memory vectors ``[B, M, d]`` of embedding ``table`` plus its temporal encoding."""
        vectors = self._embed(table, memories)
        if self.temporal is not None:
            vectors = vectors + self.temporal[table, : memories.shape[1]]
        return vectors

    def read(self, memories: Tensor, memory_mask: Tensor, question: Tensor) -> MemoryNetworkOutput:
        """Run the ``K`` hops.

        Args:
            memories: word ids ``[B, M, L]`` (0 = padding); slot 0 is the most recent sentence.
            memory_mask: bool ``[B, M]``, True on real sentences.
            question: word ids ``[B, L_q]``.

        Returns:
            :class:`MemoryNetworkOutput` (logits ``[B, C]``, weights ``[B, K, M]``, states).
        """
        if memories.dim() != 3 or memories.dtype != torch.long:
            raise ValueError(
                f"memories must be long word ids [B, M, L], got {memories.dtype} "
                f"{tuple(memories.shape)}"
            )
        b, m, _ = memories.shape
        if m > self.memory_size:
            raise ValueError(f"at most memory_size={self.memory_size} memories, got M={m}")
        if memory_mask.dtype != torch.bool or tuple(memory_mask.shape) != (b, m):
            raise ValueError(
                f"memory_mask must be bool [B, M] = {(b, m)}, got {memory_mask.dtype} "
                f"{tuple(memory_mask.shape)}"
            )
        if question.dim() != 2 or question.dtype != torch.long or question.shape[0] != b:
            raise ValueError(
                f"question must be long word ids [B={b}, L_q], got {question.dtype} "
                f"{tuple(question.shape)}"
            )
        u = self._embed(0, question)  # u^1 = B q, B = A^1
        states, weights = [u], []
        dropout = self.dropout if self.training else 0.0
        for k in range(self.hops):
            keys = self._memory(k, memories)  # m_i with A^{k+1} = C^k (= B for k = 0)
            values = self._memory(k + 1, memories)  # c_i with C^{k+1}
            u, p = self.hop_modules[k](u, keys, values, memory_mask, dropout)
            states.append(u)
            weights.append(p)  # [B, M]
        last = cast(nn.Embedding, self.embeddings[self.hops])
        answers = last.weight[self.answer_ids]  # rows of W^T = C^K: [C, d]
        logits = u @ answers.T  # eq. (3) before the softmax
        return MemoryNetworkOutput(logits, torch.stack(weights, 1), torch.stack(states, 1))

    def forward(self, memories: Tensor, memory_mask: Tensor, question: Tensor) -> Tensor:
        """Answer logits ``[B, C]`` (see :meth:`read`)."""
        return self.read(memories, memory_mask, question).logits
