"""MemN2N against its equations written out in float64 loops (Sukhbaatar et al. 2015, §2, §4.1)."""

from __future__ import annotations

import pytest
import torch

from attnkit.config import validate
from attnkit.data.memory_qa import LOCATIONS, QAExample
from attnkit.evaluate import ablate
from attnkit.models.memory_network import EndToEndMemoryNetwork, position_encoding
from attnkit.tasks.base import task_for

ANSWERS = torch.tensor([3, 5, 7])
MEMORIES = torch.tensor(
    [
        [[4, 5, 6, 0], [7, 8, 0, 0], [9, 4, 5, 6], [0, 0, 0, 0]],  # 3 real sentences, 1 padding
        [[6, 6, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]],  # 1 real sentence
    ]
)
MASK = torch.tensor([[True, True, True, False], [True, False, False, False]])
QUESTION = torch.tensor([[2, 9, 4], [8, 5, 0]])


def l_weights(words: list[int], dim: int, encoding: str) -> list[list[float]]:
    """``l_kj`` of MemN2N §4.1 for the real words (1-based j, k), or all ones for a bag of words."""
    big_j = sum(1 for w in words if w != 0)
    if encoding == "bag_of_words":
        return [[1.0] * dim for _ in range(big_j)]
    return [
        [(1 - j / big_j) - (k / dim) * (1 - 2 * j / big_j) for k in range(1, dim + 1)]
        for j in range(1, big_j + 1)
    ]


def embed(table: torch.Tensor, words: list[int], encoding: str) -> torch.Tensor:
    dim = table.shape[1]
    ls = l_weights(words, dim, encoding)
    real = [w for w in words if w != 0]
    return sum(
        (torch.tensor(ls[j], dtype=torch.float64) * table[w] for j, w in enumerate(real)),
        torch.zeros(dim, dtype=torch.float64),
    )


def reference(net: EndToEndMemoryNetwork, encoding: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits [B, C], weights [B, K, M])`` of MemN2N with adjacent tying, in float64 loops."""
    tables = [e.weight.detach().double() for e in net.embeddings]
    temporal = None if net.temporal is None else net.temporal.detach().double()
    all_logits, all_weights = [], []
    for b in range(MEMORIES.shape[0]):
        u = embed(tables[0], QUESTION[b].tolist(), encoding)  # u^1 = B q, B = A^1
        hop_weights = []
        for k in range(net.hops):
            real = [i for i in range(MEMORIES.shape[1]) if MASK[b, i]]
            m = [embed(tables[k], MEMORIES[b, i].tolist(), encoding) for i in real]  # A^{k+1}
            c = [embed(tables[k + 1], MEMORIES[b, i].tolist(), encoding) for i in real]  # C^{k+1}
            if temporal is not None:
                m = [mi + temporal[k, i] for mi, i in zip(m, real, strict=True)]
                c = [ci + temporal[k + 1, i] for ci, i in zip(c, real, strict=True)]
            scores = torch.stack([u @ mi for mi in m])  # u^T m_i (eq. 1)
            p = torch.exp(scores - scores.max()) / torch.exp(scores - scores.max()).sum()
            u = u + sum(p[n] * c[n] for n in range(len(real)))  # u^{k+1} = u^k + o^k (eq. 2)
            row = torch.zeros(MEMORIES.shape[1], dtype=torch.float64)
            row[real] = p
            hop_weights.append(row)
        all_logits.append(torch.stack([u @ tables[net.hops][a] for a in ANSWERS]))  # W^T = C^K
        all_weights.append(torch.stack(hop_weights))
    return torch.stack(all_logits), torch.stack(all_weights)


@pytest.mark.parametrize("encoding", ["position", "bag_of_words"])
@pytest.mark.parametrize("hops,temporal", [(1, False), (1, True), (3, True)])
def test_hops_match_the_equations_in_float64(encoding: str, hops: int, temporal: bool) -> None:
    torch.manual_seed(hops)
    net = EndToEndMemoryNetwork(
        10,
        ANSWERS,
        embed_dim=6,
        hops=hops,
        memory_size=5,
        sentence_encoding=encoding,  # type: ignore[arg-type]
        temporal_encoding=temporal,
        init_std=0.5,  # larger than the paper's 0.1 so the softmax is far from uniform
    ).double()
    out = net.read(MEMORIES, MASK, QUESTION)
    logits, weights = reference(net, encoding)
    assert out.logits.shape == (2, 3) and out.weights.shape == (2, hops, 4)
    assert out.states.shape == (2, hops + 1, 6)
    torch.testing.assert_close(out.weights, weights, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(out.logits, logits, atol=1e-12, rtol=1e-10)
    assert weights[0, 0].max() > 0.4  # not a near-uniform example


def test_position_encoding_by_hand() -> None:
    # J = 2, d = 2: l_kj = (1 - j/2) - (k/2)(1 - j)
    expected = torch.tensor([[0.5, 0.5], [0.0, 0.0], [0.0, 0.0]])  # j = 1: 0.5 - 0 for any k
    expected[1] = torch.tensor([0.0 + 0.5 * 1, 0.0 + 1.0 * 1])  # j = 2: 0 - (k/2)(-1)
    torch.testing.assert_close(position_encoding(torch.tensor(2), 3, 2), expected)


def test_padding_is_ignored_and_ablation_changes_the_answer() -> None:
    torch.manual_seed(0)
    net = EndToEndMemoryNetwork(10, ANSWERS, embed_dim=6, hops=2, memory_size=4, init_std=0.5)
    out = net.read(MEMORIES, MASK, QUESTION)
    changed = MEMORIES.clone()
    changed[0, 3] = torch.tensor([4, 4, 4, 4])  # a padded slot's words
    changed[1, 1:] = 9
    torch.testing.assert_close(net(changed, MASK, QUESTION), out.logits)
    assert (out.weights[~MASK[:, None, :].expand(-1, 2, -1)] == 0).all()
    with ablate(net, "uniform"):
        ablated = net.read(MEMORIES, MASK, QUESTION)
    uniform = MASK.float() / MASK.sum(-1, keepdim=True)
    torch.testing.assert_close(ablated.weights, uniform[:, None].expand(-1, 2, -1))
    assert (ablated.logits - out.logits).abs().max() > 1e-4


def test_bad_inputs_raise() -> None:
    net = EndToEndMemoryNetwork(10, ANSWERS, embed_dim=4, hops=1, memory_size=3)
    with pytest.raises(ValueError, match="memory_size=3"):
        net(MEMORIES, MASK, QUESTION)
    with pytest.raises(ValueError, match="memory_mask"):
        net(MEMORIES[:, :3], MASK.float()[:, :3], QUESTION)
    with pytest.raises(ValueError, match="answer_ids"):
        EndToEndMemoryNetwork(10, torch.tensor([3, 10]))
    with pytest.raises(ValueError, match="sentence_encoding"):
        EndToEndMemoryNetwork(10, ANSWERS, sentence_encoding="bow")  # type: ignore[arg-type]


def test_task_collates_newest_first_within_memory_size() -> None:
    config = validate(
        {
            "name": "memory-test",
            "data": {"corpus": "memory_qa", "max_examples": 60},
            "model": {"kind": "memory_network", "memory_size": 3, "embed_dim": 8, "hops": 2},
            "train": {"steps": 1},
        }
    )
    task = task_for(config)
    splits = task.load()
    assert [len(splits[s]) for s in ("train", "valid", "test")] == [60, 500, 1000]
    task.fit(splits["train"])
    story = (("mary", "went", "to", "the", "kitchen"), ("mary", "got", "the", "milk"))
    story = (*story, ("john", "moved", "to", "the", "office"), ("mary", "dropped", "the", "milk"))
    example = QAExample(story, ("where", "is", "the", "milk"), "kitchen", (0, 3), "object")
    batch = task.collate([example, splits["train"][0]])
    words = task.words
    assert batch["memories"].shape[:2] == (2, 3)  # only the 3 newest of 4 sentences
    assert words.decode(batch["memories"][0, 0].tolist()) == list(story[3])
    assert words.decode(batch["memories"][0, 2].tolist()) == list(story[1])
    assert words.decode(batch["question"][0].tolist()) == ["where", "is", "the", "milk"]
    assert task.classes[task.label(example)] == "kitchen" and task.classes == LOCATIONS
    model = task.build_model()
    assert model(**batch).shape == (2, len(LOCATIONS))
    assert words.decode(model.answer_ids.tolist()) == list(LOCATIONS)


def test_artifacts_are_hop_heatmaps(tmp_path) -> None:
    config = validate(
        {
            "name": "memory-test",
            "data": {"corpus": "memory_qa", "max_examples": 40},
            "model": {"kind": "memory_network", "embed_dim": 8, "hops": 2},
            "train": {"steps": 1},
        }
    )
    task = task_for(config)
    splits = task.load()
    task.fit(splits["train"])
    paths = task.artifacts(task.build_model(), splits["test"][:20], tmp_path / "maps")
    assert 1 <= len(paths) <= 3
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)
