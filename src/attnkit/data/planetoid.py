"""Cora and Citeseer citation graphs with the Planetoid split (Yang, Cohen & Salakhutdinov 2016),
as GCN (Kipf & Welling 2017), GAT (Veličković et al. 2018) and PyTorch Geometric use them.

Files of a ``planetoid`` directory, for ``NAME`` in ``cora``, ``citeseer``: ``ind.NAME.x``,
``.tx``, ``.allx`` (pickled ``scipy.sparse`` feature matrices: the training nodes, the test nodes,
every node that is not a test node), ``.y``, ``.ty``, ``.ally`` (pickled one-hot ``numpy``
labels of the same rows), ``.graph`` (a pickled ``dict[int, list[int]]`` adjacency) and
``.test.index`` (the test node ids, one a line, not sorted).

Assembly, as PyG's ``read_planetoid_data`` does it:

* features ``[allx; tx]``, where row ``len(allx) + k`` of the stack is the test node
  ``sorted(test.index)[k]`` and row ``test.index[k]`` of ``tx`` belongs to node ``test.index[k]``
  (so ``x[test_index] = stack[sorted(test_index)]``);
* Citeseer's test ids skip 15 ids (isolated nodes of the citation graph with no features and no
  label): ``tx``/``ty`` are first padded with zero rows for them, so the graph has 3,327 nodes;
  their label is 0 (the argmax of a zero row, as in PyG) and they are in no split;
* edges: every ``(i, j)`` of the adjacency in both directions, duplicates removed, and the
  file's self-loops removed (Citeseer lists 124; a graph attention layer adds ``i → i`` to every
  node itself), sorted by ``(source, target)``;
* split: training nodes ``0 … len(y) − 1`` (the first 20 labelled nodes of each class), valid
  ``len(y) … len(y) + 499``, test the ids of ``test.index``.

Measured on the files of ``kimiyoung/planetoid`` (``tests/data/test_planetoid.py``):

========  =====  ========  =======  ========================  ====================  ===========
graph     nodes  features  classes  adjacency entries (/2)    undirected edges      train/valid
                                                              (directed, no loops)  /test
========  =====  ========  =======  ========================  ====================  ===========
Cora      2,708  1,433     7        10,858 (5,429)            5,278 (10,556)        140/500/1000
Citeseer  3,327  3,703     6        9,464 (4,732)             4,552 (9,104)         120/500/1000
========  =====  ========  =======  ========================  ====================  ===========

The edge counts usually quoted (5,429 and 4,732) are half the adjacency entries, counting the
duplicate entries and self-loops; the graph a model sees has 10,556 / 9,104 directed edges, as
PyG's ``Planetoid`` reports.

The pickles are read with an unpickler that admits only the classes these files hold (a numpy
array, its dtype, a scipy CSR matrix, a ``defaultdict`` and lists), so a replaced file cannot
run code.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

NAMES = ("cora", "citeseer")
VALID_NODES = 500  # the valid nodes follow the training nodes
PARTS = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")


@dataclass(frozen=True)
class PlanetoidGraph:
    """One citation graph and its standard split (N nodes, F features, E directed edges).

    Attributes:
        name: ``"cora"`` or ``"citeseer"``.
        features: bag-of-words features ``[N, F]`` float32 (binary, or row-normalised).
        labels: the class of each node ``[N]`` long (0 for Citeseer's 15 unlabelled nodes).
        edge_index: ``[2, E]`` long, row 0 the source, row 1 the target; both directions of
            every citation, no duplicates, no self-loops.
        train_mask, valid_mask, test_mask: ``[N]`` bool.
        num_classes: the number of classes.
    """

    name: str
    features: Tensor
    labels: Tensor
    edge_index: Tensor
    train_mask: Tensor
    valid_mask: Tensor
    test_mask: Tensor
    num_classes: int

    @property
    def num_nodes(self) -> int:
        return int(self.features.shape[0])


def _allowed_globals() -> dict[tuple[str, str], Any]:
    import codecs
    import collections

    import scipy.sparse

    try:  # numpy >= 2 keeps the implementation in numpy._core
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]
    return {
        # protocol 2 writes numpy's bytes through _codecs.encode (Python 2 compatibility)
        ("_codecs", "encode"): codecs.encode,
        ("collections", "defaultdict"): collections.defaultdict,
        ("__builtin__", "list"): list,
        ("builtins", "list"): list,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
        # pickled by scipy < 1.8 from the module scipy.sparse.csr (deprecated since)
        ("scipy.sparse.csr", "csr_matrix"): scipy.sparse.csr_matrix,
        ("scipy.sparse._csr", "csr_matrix"): scipy.sparse.csr_matrix,
    }


class _PlanetoidUnpickler(pickle.Unpickler):
    """Unpickles only the classes a Planetoid file holds; anything else is refused."""

    def __init__(self, file: io.BytesIO, path: Path) -> None:
        super().__init__(file, encoding="latin1")  # the files were pickled by Python 2
        self.path = path
        self.allowed = _allowed_globals()

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self.allowed[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"{self.path}: expected a pickled numpy array, scipy CSR matrix or adjacency "
                f"dict, got a reference to {module}.{name}"
            ) from None


def _path(root: Path, name: str, part: str) -> Path:
    path = root / f"ind.{name}.{part}"
    if not path.is_file():
        raise FileNotFoundError(f"Planetoid file not found: {path}")
    return path


def _unpickle(path: Path) -> Any:
    try:
        return _PlanetoidUnpickler(io.BytesIO(path.read_bytes()), path).load()
    except pickle.UnpicklingError as error:
        if str(error).startswith(str(path)):
            raise ValueError(str(error)) from None
        raise ValueError(f"{path}: expected a pickle, could not read it ({error})") from None
    except (EOFError, ValueError, TypeError, AttributeError, IndexError) as error:
        raise ValueError(f"{path}: expected a pickle, could not read it ({error})") from None


def _matrix(path: Path, rows: int | None = None) -> np.ndarray:
    value = _unpickle(path)
    dense = value.toarray() if hasattr(value, "toarray") else value
    if not isinstance(dense, np.ndarray) or dense.ndim != 2:
        raise ValueError(
            f"{path}: expected a 2-D matrix, got {type(value).__name__} "
            f"of shape {getattr(dense, 'shape', '?')}"
        )
    if rows is not None and dense.shape[0] != rows:
        raise ValueError(f"{path}: expected {rows} rows, got {dense.shape[0]}")
    return dense


def _test_index(path: Path) -> np.ndarray:
    ids = []
    for number, line in enumerate(
        path.read_text(encoding="utf-8", errors="replace").split("\n"), start=1
    ):
        if not line.strip():
            continue
        try:
            ids.append(int(line))
        except ValueError:
            raise ValueError(
                f"{path}: line {number}: expected a node id (an integer), got {line!r:.40}"
            ) from None
    return np.asarray(ids, dtype=np.int64)


def _adjacency(path: Path, num_nodes: int) -> dict[int, list[int]]:
    graph = _unpickle(path)
    if not isinstance(graph, dict):
        raise ValueError(f"{path}: expected a dict of node -> neighbour list, got {type(graph)}")
    for node, neighbours in graph.items():
        if not isinstance(neighbours, list):
            raise ValueError(
                f"{path}: expected a neighbour list for node {node!r}, got {neighbours!r:.40}"
            )
        bad = [
            n
            for n in (node, *neighbours)
            if isinstance(n, bool) or not isinstance(n, int | np.integer) or not 0 <= n < num_nodes
        ]
        if bad:
            raise ValueError(
                f"{path}: expected node ids in [0, {num_nodes}), got {bad[0]} (node {node})"
            )
    return graph


def adjacency_entries(root: str | Path, name: str) -> int:
    """How many ``(node, neighbour)`` entries the ``ind.NAME.graph`` adjacency lists (duplicates
    and self-loops included): twice the edge count usually quoted for the graph."""
    graph = _unpickle(_path(Path(root), _check_name(name), "graph"))
    return sum(len(neighbours) for neighbours in graph.values())


def _check_name(name: str) -> str:
    if name not in NAMES:
        raise ValueError(f"name must be one of {NAMES}, got {name!r}")
    return name


def normalize_rows(features: Tensor) -> Tensor:
    """Each row divided by its sum (rows summing to 0 stay 0): the feature preprocessing of GCN
    and GAT, ``x_i / Σ_f x_if``. Args: features ``[N, F]``. Returns ``[N, F]``."""
    sums = features.sum(dim=-1, keepdim=True)
    return torch.where(sums > 0, features / torch.where(sums > 0, sums, 1), 0)


def load_planetoid(root: str | Path, name: str, normalize_features: bool = False) -> PlanetoidGraph:
    """Cora or Citeseer with the standard Planetoid split (see the module docstring).

    Args:
        root: the directory holding the ``ind.NAME.*`` files.
        name: ``"cora"`` or ``"citeseer"``.
        normalize_features: divide each node's features by their sum (:func:`normalize_rows`),
            as GCN and GAT do; otherwise the binary bag of words.

    Returns:
        A :class:`PlanetoidGraph`.
    """
    root = Path(root)
    name = _check_name(name)
    y = _matrix(_path(root, name, "y"))
    x = _matrix(_path(root, name, "x"), rows=len(y))
    ally = _matrix(_path(root, name, "ally"))
    allx = _matrix(_path(root, name, "allx"), rows=len(ally))
    test_index = _test_index(_path(root, name, "test.index"))
    ty = _matrix(_path(root, name, "ty"), rows=len(test_index))
    tx = _matrix(_path(root, name, "tx"), rows=len(test_index))
    if len(test_index) == 0 or len(set(test_index.tolist())) != len(test_index):
        raise ValueError(
            f"{root / f'ind.{name}.test.index'}: expected distinct node ids, got "
            f"{len(test_index)} ids of which {len(set(test_index.tolist()))} distinct"
        )
    if test_index.min() != len(allx):
        raise ValueError(
            f"{root / f'ind.{name}.test.index'}: expected the smallest test id to be {len(allx)} "
            f"(the number of rows of ind.{name}.allx), got {test_index.min()}"
        )
    if len(y) + VALID_NODES > len(allx):
        raise ValueError(
            f"{root / f'ind.{name}.allx'}: expected at least {len(y) + VALID_NODES} rows (the "
            f"{len(y)} training and {VALID_NODES} valid nodes), got {len(allx)}"
        )
    widths = {part: m.shape[1] for part, m in (("x", x), ("allx", allx), ("tx", tx))}
    if len(set(widths.values())) != 1 or x.shape[1] == 0:
        raise ValueError(
            f"{root}: expected one feature width in ind.{name}.x/allx/tx, got {widths}"
        )
    classes = {part: m.shape[1] for part, m in (("y", y), ("ally", ally), ("ty", ty))}
    if len(set(classes.values())) != 1:
        raise ValueError(f"{root}: expected one class count in ind.{name}.y/ally/ty, got {classes}")
    sorted_test = np.sort(test_index)
    # Test ids that are missing from the range (Citeseer's isolated nodes) get zero rows, so
    # that row k of the padded block is node sorted_test[0] + k.
    span = int(sorted_test[-1] - sorted_test[0]) + 1
    tx_padded = np.zeros((span, tx.shape[1]), dtype=np.float32)
    ty_padded = np.zeros((span, ty.shape[1]), dtype=ty.dtype)
    tx_padded[sorted_test - sorted_test[0]] = tx
    ty_padded[sorted_test - sorted_test[0]] = ty
    features = np.concatenate([allx.astype(np.float32), tx_padded])
    one_hot = np.concatenate([ally, ty_padded])
    features[test_index] = features[sorted_test]
    one_hot[test_index] = one_hot[sorted_test]
    num_nodes = len(features)

    graph = _adjacency(_path(root, name, "graph"), num_nodes)
    pairs = {
        (int(node), int(neighbour))
        for node, neighbours in graph.items()
        for neighbour in neighbours
        if int(node) != int(neighbour)
    }
    pairs |= {(j, i) for i, j in pairs}
    edge_index = torch.tensor(sorted(pairs), dtype=torch.long).reshape(-1, 2).T.contiguous()

    def mask(ids: np.ndarray) -> Tensor:
        out = torch.zeros(num_nodes, dtype=torch.bool)
        out[torch.from_numpy(ids)] = True
        return out

    train_ids = np.arange(len(y))
    valid_ids = np.arange(len(y), len(y) + VALID_NODES)
    x_tensor = torch.from_numpy(features)
    return PlanetoidGraph(
        name=name,
        features=normalize_rows(x_tensor) if normalize_features else x_tensor,
        labels=torch.from_numpy(one_hot.argmax(axis=1).astype(np.int64)),
        edge_index=edge_index,
        train_mask=mask(train_ids),
        valid_mask=mask(valid_ids),
        test_mask=mask(test_index),
        num_classes=int(one_hot.shape[1]),
    )


__all__ = [
    "NAMES",
    "PlanetoidGraph",
    "adjacency_entries",
    "load_planetoid",
    "normalize_rows",
]
