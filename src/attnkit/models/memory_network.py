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

The authors' implementation weighs word ``j`` of ``J`` (``J`` the padded sentence length) in
dimension ``k`` by ``1 + 4 (k − (d+1)/2)(j − (J+1)/2) / (dJ)``, which is twice the paper's
``l_kj`` up to the ``+1`` in ``(d+1)/2`` and ``(J+1)/2``: ``l_kj = ½ (1 + 4 (k − d/2)(j − J/2) /
(dJ))``. ``position_scale=2`` gives that scale with the paper's formula. It is not cosmetic: the
sentence vectors are twice as long at initialisation and every update of the embeddings moves
them twice as far (in our runs of bAbI task 16 with linear start: 53 % against 0.5 % test
error).

Two training devices of §4.2 and §4.1:

* **linear start** (LS, ``linear_start=True``): training starts with the softmax of each memory
  layer removed (the model is linear but for the answer's softmax), and the softmaxes are
  re-inserted once the validation loss stops decreasing. Without the softmax a hop reads
  ``p^k_i = u^k·m_i`` (:class:`Unnormalized`).
  The training loop reports each validation to :meth:`EndToEndMemoryNetwork.after_validation`;
  :class:`LinearStart` keeps the best validation loss and re-inserts the softmaxes at the first
  validation that does not lower it (``patience`` validations), or, with
  ``linear_start_epochs=N``, after exactly ``N`` validations whatever their losses (the authors'
  code: 20 epochs of linear start). Its state is buffers of the model, so checkpoints carry it
  and a resumed run switches where the uninterrupted one does.
* **random noise** (RN, ``temporal_noise=0.1``): in training, up to 10 % of empty memories are
  added to each story at random, to regularise ``T_A``. The empty memories are realised as
  unused temporal slots: a story of ``n`` memories draws ``n_0`` uniform in
  ``{0, …, ⌈0.1 n⌉}`` and its memories take ``n`` random slots of ``0 … n + n_0 − 1`` in their
  order (newest first), so ``T(i)`` no longer says exactly how many sentences ago a memory was
  (slots past ``memory_size − 1`` share the last one). Evaluation uses the exact slots.

**Null memories** (``null_memory_slots=S``): the paper pads every story "to a fixed size" with
a null symbol whose embedding is zero (§4.2), and the authors' code keeps those empty memories in
each hop's softmax. A story of ``n < S`` memories gets ``S − n`` memories ``m_i = c_i = 0`` (no
word, no temporal term) that the softmax includes with score ``u·0 = 0``::

    p^k = softmax([u^k·m_1, …, u^k·m_n, 0, …, 0])      (S − n zeros; they add nothing to o^k)

so the mass left on the null memories lets a hop read less than one memory's worth. Without
them (the default) padding is masked out and the real memories share all the mass. Stories of
``S`` memories or more get none, so their answers are the same with or without the option.

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

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, cast

import torch
from torch import Tensor, nn

from attnkit.core.align import Align
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


class Unnormalized(Align):
    """The hop without its softmax, as in linear start: ``a_l = e_l`` on admissible keys, ``0``
    on the others (Sukhbaatar et al. 2015, §4.2).

    Example::

        >>> Unnormalized()(torch.tensor([[2.0, -1.0, 3.0]]), torch.tensor([[True, True, False]]))
        tensor([[ 2., -1.,  0.]])
    """

    normalized = False

    def sample(self, e, mask=None, *, query=None, key=None, q_offset=0):
        return (e if mask is None else e.masked_fill(~mask, 0.0)), None


class LinearStart(nn.Module):
    """When linear start re-inserts the softmaxes: at the ``patience``-th validation whose loss
    is not below the best seen (MemN2N §4.2: once the validation loss stops decreasing), or at
    the ``epochs``-th validation when ``epochs`` is given (the authors' code: a fixed 20 epochs,
    with one validation per epoch).

    The state is three buffers (``active``, ``best_loss``, ``waited``), saved with the model;
    with ``epochs``, ``waited`` counts every validation so far.

    Args:
        patience: validations without a lower loss before the softmaxes return (the paper: 1).
        epochs: validations before the softmaxes return, whatever the losses (None: the
            ``patience`` rule).

    Example::

        >>> ls = LinearStart()
        >>> [ls.update(loss) for loss in (2.0, 1.5, 1.6)], bool(ls.active)
        ([True, True, False], False)
    """

    active: Tensor
    best_loss: Tensor
    waited: Tensor

    def __init__(self, patience: int = 1, epochs: int | None = None) -> None:
        super().__init__()
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ValueError(f"patience must be a positive int, got {patience!r}")
        if epochs is not None and (
            isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1
        ):
            raise ValueError(f"epochs must be a positive int or None, got {epochs!r}")
        self.patience, self.epochs = patience, epochs
        self.register_buffer("active", torch.tensor(True))
        self.register_buffer("best_loss", torch.tensor(math.inf, dtype=torch.float64))
        self.register_buffer("waited", torch.tensor(0))

    def update(self, loss: float) -> bool:
        """Take one validation loss; returns whether the model stays linear."""
        if not bool(self.active):
            return False
        if self.epochs is not None:
            self.waited += 1
            if int(self.waited) >= self.epochs:
                self.active.fill_(False)
            return bool(self.active)
        if not math.isfinite(loss):
            raise ValueError(f"linear start needs a finite validation loss, got {loss}")
        if loss < float(self.best_loss):
            self.best_loss.fill_(loss)
            self.waited.zero_()
        else:
            self.waited += 1
            if int(self.waited) >= self.patience:
                self.active.fill_(False)
        return bool(self.active)


def temporal_slots(mask: Tensor, memory_size: int, noise: float = 0.0) -> Tensor:
    """The temporal slot of each memory, ``[B, M]`` long: ``i`` for memory ``i`` (slot 0 the
    newest), or with ``noise > 0`` (random noise, MemN2N §4.1) ``n`` random increasing slots of
    ``0 … n + n_0 − 1`` with ``n_0`` uniform in ``{0, …, ⌈noise · n⌉}`` empty memories, for a
    story of ``n`` memories; capped at ``memory_size − 1``.

    Args:
        mask: bool ``[B, M]``, True on real memories.
        memory_size: the number of temporal slots.
        noise: the share of empty memories added at most (0: the exact slots).
    """
    b, m = mask.shape
    exact = torch.arange(m, device=mask.device).expand(b, m)
    if noise <= 0:
        return exact.clamp(max=memory_size - 1)
    n = mask.sum(-1)  # [B]
    most = torch.ceil(noise * n.double()).long()  # ⌈noise · n⌉
    blanks = (torch.rand(b, device=mask.device) * (most + 1).double()).floor().long()  # [B]
    span = m + int(most.max())
    positions = torch.arange(span, device=mask.device)
    # a random subset of n of the first n + n_0 positions: the n smallest of random keys
    keys = torch.rand(b, span, device=mask.device)
    keys = keys.masked_fill(positions >= (n + blanks)[:, None], math.inf)
    chosen = keys.argsort(-1)[:, :m]  # [B, M]; the first n of each row are the subset
    chosen = chosen.masked_fill(torch.arange(m, device=mask.device) >= n[:, None], span)
    ordered = chosen.sort(-1).values  # increasing: the newest memory gets the smallest slot
    rank = (mask.long().cumsum(-1) - 1).clamp(min=0)  # memory i is the rank-th real one
    slots = torch.where(mask, ordered.gather(-1, rank), exact)
    return slots.clamp(max=memory_size - 1)


class MemoryHop(nn.Module):
    """One hop of MemN2N: ``p = softmax_i(u·m_i)``, ``o = Σ_i p_i c_i``, ``u' = u + o`` (eq. 1-2).

    It holds no parameters (the embeddings are tied across hops and live in the network); it is a
    module so each hop is a named module (``hop_modules.0``, ``hop_modules.1``, …) that
    ``interpret.record`` and ``evaluate.ablate`` can select, whichever method of the network runs
    it.
    """

    def forward(
        self,
        u: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor,
        dropout: float = 0.0,
        linear: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """``(u^{k+1} [B, d], p^k [B, M])`` from ``u^k [B, d]``, memory vectors ``keys [B, M, d]``
        and ``values [B, M, d]``, ``mask [B, M]`` (True = a real memory); ``linear``: without
        the softmax (linear start, :class:`Unnormalized`)."""
        out = attention(
            u[:, None, :],  # [B, 1, d]
            keys,
            values,
            score="dot",  # u^T m_i (eq. 1)
            align=_UNNORMALIZED if linear else "softmax",
            mask=mask[:, None, :],  # [B, 1, M]
            dropout=dropout,
            return_weights=True,
        )
        assert out.weights is not None
        return u + out.context[:, 0], out.weights[:, 0]  # u^{k+1} = u^k + o^k


_UNNORMALIZED = Unnormalized()


class EndToEndMemoryNetwork(nn.Module):
    """MemN2N with adjacent weight tying (see the module docstring for the equations).

    Args:
        vocab_size: ``V``; id 0 is padding (its embedding stays zero).
        answer_ids: the vocabulary ids of the answers, ``[C]`` long; logit ``c`` is answer ``c``.
        embed_dim: ``d``.
        hops: ``K``.
        memory_size: ``M``, slots of temporal encoding (the most recent ``M`` sentences).
        sentence_encoding: ``"bag_of_words"`` or ``"position"``.
        position_scale: multiplies the position encoding ``l_kj`` (1: the paper's formula; 2:
            the scale of the authors' implementation, see the module docstring).
        temporal_encoding: add the learned ``T_A(i)``, ``T_C(i)``.
        dropout: on the attention weights, in training mode only.
        init_std: std of the normal initialisation of the embeddings (the paper: 0.1).
        linear_start: start without the hops' softmaxes (:class:`LinearStart`).
        linear_start_patience: validations without a lower loss before they return.
        temporal_noise: random noise, the share of empty memories added in training
            (:func:`temporal_slots`; the paper: 0.1); needs ``temporal_encoding``.
        linear_start_epochs: validations before the softmaxes return, whatever the losses
            (None: the ``linear_start_patience`` rule).
        null_memory_slots: ``S``, pad each story's memory with null memories up to ``S``
            slots, kept in every hop's softmax (see the module docstring); None: padding is
            masked out.

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
        position_scale: float = 1.0,
        temporal_encoding: bool = True,
        dropout: float = 0.0,
        init_std: float = 0.1,
        linear_start: bool = False,
        linear_start_patience: int = 1,
        temporal_noise: float = 0.0,
        linear_start_epochs: int | None = None,
        null_memory_slots: int | None = None,
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
        if null_memory_slots is not None and (
            isinstance(null_memory_slots, bool)
            or not isinstance(null_memory_slots, int)
            or not 1 <= null_memory_slots <= memory_size
        ):
            raise ValueError(
                f"null_memory_slots must be an int in [1, memory_size={memory_size}] or None, "
                f"got {null_memory_slots!r}"
            )
        if linear_start_epochs is not None and not linear_start:
            raise ValueError("linear_start_epochs says when linear start ends: it needs one")
        self.null_memory_slots = null_memory_slots
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
        if not position_scale > 0:
            raise ValueError(f"position_scale must be positive, got {position_scale!r}")
        self.position_scale = position_scale
        if not 0.0 <= temporal_noise < 1.0:
            raise ValueError(f"temporal_noise must be in [0, 1), got {temporal_noise!r}")
        if temporal_noise and not temporal_encoding:
            raise ValueError("temporal_noise perturbs the temporal encoding: it needs one")
        self.temporal_noise = temporal_noise
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
        # only when asked: a model without it keeps the state dict it always had
        self.linear_start = (
            LinearStart(linear_start_patience, linear_start_epochs) if linear_start else None
        )
        self.taxonomy = {"query_multiplicity": "Multi-Hop", "scoring": "Dot-Product"}

    def _encoding(self, words: Tensor) -> Tensor | None:
        """The position encoding ``l [..., L, d]`` of sentences ``words [..., L]`` (None for a
        bag of words); the same for every embedding table, so computed once per read."""
        if self.sentence_encoding != "position":
            return None
        dtype = self.embeddings[0].weight.dtype
        encoding = position_encoding((words != 0).sum(-1), words.shape[-1], self.embed_dim, dtype)
        return encoding if self.position_scale == 1 else self.position_scale * encoding

    def _embed(self, table: int, words: Tensor, encoding: Tensor | None) -> Tensor:
        """``Σ_j l_j ∘ E x_j`` of sentences ``words [..., L]`` with embedding ``table``,
        ``[..., d]``."""
        vectors = self.embeddings[table](words)  # [..., L, d]; padding rows are zero
        if encoding is not None:
            vectors = vectors * encoding
        return vectors.sum(-2)

    def _memory(
        self, table: int, memories: Tensor, encoding: Tensor | None, slots: Tensor
    ) -> Tensor:
        """Memory vectors ``[B, M, d]`` of embedding ``table`` plus its temporal encoding at
        ``slots [B, M]``."""
        vectors = self._embed(table, memories, encoding)
        if self.temporal is not None:
            vectors = vectors + self.temporal[table][slots]  # [B, M, d]
        return vectors

    @property
    def linear(self) -> bool:
        """Whether the hops run without their softmax (linear start, before the switch)."""
        return self.linear_start is not None and bool(self.linear_start.active)

    def after_validation(self, metrics: Mapping[str, float]) -> None:
        """The training loop's report of a validation (``metrics["loss"]``): linear start
        re-inserts the softmaxes once the loss stops decreasing (:class:`LinearStart`)."""
        if self.linear_start is not None:
            self.linear_start.update(float(metrics["loss"]))

    def read(self, memories: Tensor, memory_mask: Tensor, question: Tensor) -> MemoryNetworkOutput:
        """Run the ``K`` hops.

        Args:
            memories: word ids ``[B, M, L]`` (0 = padding); slot 0 is the most recent sentence.
            memory_mask: bool ``[B, M]``, True on real sentences.
            question: word ids ``[B, L_q]``.

        Returns:
            :class:`MemoryNetworkOutput` (logits ``[B, C]``, weights ``[B, K, M']``: the hops'
            ``p^k``, before linear start's switch their raw scores ``u^k·m_i``, states).
            ``M' = max(M, null_memory_slots)``; a null memory's weight is in its slot.
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
        u = self._embed(0, question, self._encoding(question))  # u^1 = B q, B = A^1
        states, weights = [u], []
        dropout = self.dropout if self.training else 0.0
        noise = self.temporal_noise if self.training else 0.0
        slots = temporal_slots(memory_mask, self.memory_size, noise)  # one draw for every hop
        encoding = self._encoding(memories)
        # table t gives the values of hop t and the keys of hop t + 1 (A^{k+1} = C^k)
        vectors = [self._memory(t, memories, encoding, slots) for t in range(self.hops + 1)]
        admissible = memory_mask
        if self.null_memory_slots is not None:
            vectors, admissible = self._with_null_memories(vectors, memory_mask)
        linear = self.linear
        for k in range(self.hops):
            keys, values = vectors[k], vectors[k + 1]  # m_i with A^{k+1}; c_i with C^{k+1}
            u, p = self.hop_modules[k](u, keys, values, admissible, dropout, linear)
            states.append(u)
            weights.append(p)  # [B, M]
        last = cast(nn.Embedding, self.embeddings[self.hops])
        answers = last.weight[self.answer_ids]  # rows of W^T = C^K: [C, d]
        logits = u @ answers.T  # eq. (3) before the softmax
        return MemoryNetworkOutput(logits, torch.stack(weights, 1), torch.stack(states, 1))

    def _with_null_memories(
        self, vectors: list[Tensor], memory_mask: Tensor
    ) -> tuple[list[Tensor], Tensor]:
        """The memory vectors ``[B, M', d]`` with every slot that holds no real memory zeroed,
        ``M' = max(M, S)``, and the hops' mask ``[B, M']``: real memories and the slots below
        ``S`` (so a story of ``n < S`` memories has ``S − n`` null memories, however wide the
        batch; the slots past ``S`` of a batch padded for a longer story stay masked out)."""
        assert self.null_memory_slots is not None
        b, m = memory_mask.shape
        width = max(m, self.null_memory_slots)
        real = torch.zeros(b, width, dtype=torch.bool, device=memory_mask.device)
        real[:, :m] = memory_mask
        keep = real[..., None].to(vectors[0].dtype)  # [B, M', 1]
        # zero vectors, not masked keys: the null symbol's embedding is zero (§4.2) and it has
        # no temporal term, so the engine scores it u·0 = 0 inside the softmax
        padded = [nn.functional.pad(v, (0, 0, 0, width - m)) * keep for v in vectors]
        admissible = real | (torch.arange(width, device=real.device) < self.null_memory_slots)
        return padded, admissible

    def forward(self, memories: Tensor, memory_mask: Tensor, question: Tensor) -> Tensor:
        """Answer logits ``[B, C]`` (see :meth:`read`)."""
        return self.read(memories, memory_mask, question).logits
