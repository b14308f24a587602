"""A context-parallel Transformer layer trained 3 steps on 2 processes matches one process.

The reference is the plain ``attnkit.layers.TransformerEncoderLayer`` trained on the whole
sequence in one process (its own attention path, no ring); the context-parallel run holds half
the positions per rank, sums parameter gradients over the ranks and takes the same SGD steps (not Adam: the
keys' bias gets a zero gradient — softmax ignores a shift — and Adam would blow rounding noise
up to full-size steps).
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.distributed as dist

import attnkit.distributed as akd
from attnkit.layers import RotaryEmbedding, TransformerEncoderLayer

TOLERANCE = 1e-5

CASES = [  # (sequence length, causal, layout, norm_first, rotary)
    (11, True, "zigzag", True, True),  # 11 positions: padded to 12
    (10, False, "contiguous", False, False),
]


def _worker(rank: int, world: int) -> list[float]:
    errors = []
    for case, (n, causal, layout, norm_first, rotary) in enumerate(CASES):
        torch.manual_seed(case)
        layer = TransformerEncoderLayer(
            16, 2, 32, dropout=0.0, batch_first=True, norm_first=norm_first,
            rotary=RotaryEmbedding(8) if rotary else None,
        )  # fmt: skip
        x, y = torch.randn(2, n, 16), torch.randn(2, n, 16)
        count = y.numel()

        # One process, the whole sequence, the layer's own attention.
        single = copy.deepcopy(layer)
        optimizer = torch.optim.SGD(single.parameters(), lr=0.1)
        single_losses = []
        for _ in range(3):
            optimizer.zero_grad()
            loss = ((single(x, is_causal=causal) - y) ** 2).sum() / count
            loss.backward()
            single_losses.append(loss.item())
            optimizer.step()

        # Context parallel: this rank's positions only.
        parallel = akd.ContextParallelEncoderLayer(copy.deepcopy(layer), layout=layout)
        xs = akd.shard_sequence(x, rank=rank, world_size=world, dim=1, layout=layout)
        ys = akd.shard_sequence(y, rank=rank, world_size=world, dim=1, layout=layout)
        positions = akd.local_positions(rank, world, xs.shape[1], layout)
        real = (positions < n).view(1, -1, 1)  # padding positions are not part of the loss
        optimizer = torch.optim.SGD(parallel.parameters(), lr=0.1)
        losses = []
        for _ in range(3):
            optimizer.zero_grad()
            out = parallel(xs, is_causal=causal, length=n)
            loss = (((out - ys) ** 2) * real).sum() / count
            loss.backward()
            akd.all_reduce_gradients(parallel)
            total = loss.detach().clone()
            dist.all_reduce(total)
            losses.append(total.item())
            optimizer.step()
        errors.append(max(abs(a - b) for a, b in zip(losses, single_losses, strict=True)))
        for p, q in zip(parallel.layer.parameters(), single.parameters(), strict=True):
            errors.append((p - q).abs().max().item())
        # The trained layers give the same output too.
        with torch.no_grad():
            whole = single(x, is_causal=causal)
            mine = parallel(xs, is_causal=causal, length=n)
            gathered = akd.gather_sequence(mine, length=n, dim=1, layout=layout)
        errors.append((gathered - whole).abs().max().item())
    return errors


def test_three_training_steps_on_two_processes_match_one_process():
    results = akd.launch_local(_worker, 2, timeout=30)
    for r in results:
        assert r.error is None, f"rank {r.rank}: {r.error}"
        assert len(r.value) > 2 * len(CASES)
        assert max(r.value) <= TOLERANCE, (r.rank, r.value)


def test_unsupported_layers_are_refused():
    with pytest.raises(TypeError, match="TransformerEncoderLayer"):
        akd.ContextParallelEncoderLayer(torch.nn.Linear(2, 2))
    layer = TransformerEncoderLayer(8, 2, 16, batch_first=True, align="sparsemax")
    with pytest.raises(ValueError, match="'sparsemax'"):
        akd.ContextParallelEncoderLayer(layer)
    layer = TransformerEncoderLayer(8, 2, 16, dropout=0.1, batch_first=True)
    with pytest.raises(ValueError, match="attention dropout"):
        akd.ContextParallelEncoderLayer(layer).train()(torch.randn(1, 4, 8))
