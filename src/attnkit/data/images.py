"""Fashion-MNIST images for image classification (survey Table 3: ViT; soft vs hard attention).

Source: Fashion-MNIST (Xiao, Rasul & Vollgraf 2017, Zalando Research,
https://github.com/zalandoresearch/fashion-mnist) as installed by the Debian package
``dataset-fashion-mnist`` (``apt-get install dataset-fashion-mnist``): the four original gzipped
IDX files in ``/usr/share/datasets/fashion-mnist/``, 60,000 training and 10,000 test greyscale
images of 28 × 28 pixels, each labelled by Zalando with one of ten clothing classes
(:data:`FASHION_MNIST_CLASSES`, index = label, as in the dataset's README). Nothing is
downloaded and nothing is relabelled.

Licence: MIT (Expat), "Copyright: 2017, Zalando SE" (the package's
``/usr/share/doc/dataset-fashion-mnist/copyright``). The images are not bundled with attnkit: they
are read from the installed package.

Splits: ``test`` = the 10,000 test images in file order; ``valid`` = 5,000 training images chosen
by a permutation of the 60,000 seeded with :data:`VALID_SEED` (fixed, independent of a run's seed,
so every run validates on the same images); ``train`` = the other 55,000 in file order, cut to
their first ``max_examples``.

IDX format (LeCun's MNIST page): a big-endian header — two zero bytes, a type byte (``0x08`` =
unsigned byte), the number of dimensions ``D`` — then ``D`` big-endian uint32 sizes, then the
data in row-major order. Parsed here with numpy (:func:`read_idx`).
"""

from __future__ import annotations

import functools
import gzip
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}
#: the ten classes of Fashion-MNIST, index = label (the dataset's README)
FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
VALID_SIZE = 5000
VALID_SEED = 20170825  # Fashion-MNIST's release date; any fixed value would do
SPLITS = ("train", "valid", "test")

#: IDX type byte → numpy dtype (big-endian where it matters)
_IDX_TYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


@dataclass(frozen=True, eq=False)
class Image:
    """One greyscale image: ``pixels`` ``[h, w]`` uint8 (0 = background) and its class index.

    ``source`` says where it came from (``"train/12345"``: the file and the row in it).
    """

    pixels: np.ndarray
    label: int
    source: str


def parse_idx(data: bytes, what: str = "IDX data") -> np.ndarray:
    """The array stored in the bytes of an (uncompressed) IDX file.

    Raises ``ValueError`` naming ``what`` when the header or the length is wrong.
    """
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{what}: expected an IDX header starting with two zero bytes")
    kind, ndim = data[2], data[3]
    if kind not in _IDX_TYPES:
        raise ValueError(
            f"{what}: IDX type byte must be one of {sorted(hex(k) for k in _IDX_TYPES)}, "
            f"got {hex(kind)}"
        )
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{what}: truncated header ({len(data)} bytes, need {header})")
    shape = struct.unpack(f">{ndim}I", data[4:header])
    dtype = _IDX_TYPES[kind]
    expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) != expected:
        raise ValueError(
            f"{what}: shape {shape} of {dtype} needs {expected} bytes, the data has {len(data)}"
        )
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)


def read_idx(path: str | Path) -> np.ndarray:
    """The array in an IDX file (gzipped when its name ends in ``.gz``)."""
    path = Path(path)
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    return parse_idx(raw, str(path))


@functools.lru_cache(maxsize=2)
def _fashion_mnist_arrays(root: Path) -> dict[str, np.ndarray]:
    # cached: decompressing the 26 MB training file takes seconds, and the arrays are read-only
    missing = [name for name in FASHION_MNIST_FILES.values() if not (root / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"Fashion-MNIST not found: {', '.join(str(root / m) for m in missing)} missing; "
            "install it with `apt-get install dataset-fashion-mnist` (or `make`)"
        )
    arrays = {key: read_idx(root / name) for key, name in FASHION_MNIST_FILES.items()}
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise ValueError(
                f"Fashion-MNIST {split}: expected images [N, h, w] and labels [N], got "
                f"{images.shape} and {labels.shape}"
            )
    return arrays


def valid_rows(n_train: int) -> np.ndarray:
    """The rows of the training file that form the validation split (sorted)."""
    order = np.random.default_rng(VALID_SEED).permutation(n_train)
    return np.sort(order[:VALID_SIZE])


def load_fashion_mnist(
    max_examples: int | None = None, root: str | Path = FASHION_MNIST_DIR
) -> dict[str, list[Image]]:
    """The ``"train"``, ``"valid"``, ``"test"`` splits of Fashion-MNIST (see the module docstring).

    Args:
        max_examples: keep the first this many training images (``valid``/``test`` are whole).
        root: the directory of the four ``*-ubyte.gz`` files.
    """
    if max_examples is not None and max_examples < 1:
        raise ValueError(f"max_examples must be a positive int or None, got {max_examples}")
    arrays = _fashion_mnist_arrays(Path(root))
    images, labels = arrays["train_images"], arrays["train_labels"]
    if len(images) <= VALID_SIZE:
        raise ValueError(
            f"{root}: expected more than {VALID_SIZE} training images, got {len(images)}"
        )
    is_valid = np.zeros(len(images), dtype=bool)
    is_valid[valid_rows(len(images))] = True
    train_rows = np.flatnonzero(~is_valid)[:max_examples]

    def examples(
        split: str, array: np.ndarray, targets: np.ndarray, rows: np.ndarray
    ) -> list[Image]:
        # pixels are views into the file's array: no copy per image
        return [Image(array[i], int(targets[i]), f"{split}/{i}") for i in rows.tolist()]

    return {
        "train": examples("train", images, labels, train_rows),
        "valid": examples("train", images, labels, np.flatnonzero(is_valid)),
        "test": examples(
            "test",
            arrays["test_images"],
            arrays["test_labels"],
            np.arange(len(arrays["test_images"])),
        ),
    }
