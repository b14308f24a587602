"""Fashion-MNIST loading: the IDX parser against hand-written files, the splits on a tiny fake
copy of the dataset, and the installed dataset's known counts (skipped when it is absent)."""

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from attnkit.data.images import (
    FASHION_MNIST_DIR,
    FASHION_MNIST_FILES,
    VALID_SIZE,
    load_fashion_mnist,
    parse_idx,
    read_idx,
)


def idx_bytes(type_byte: int, shape: tuple[int, ...], payload: bytes) -> bytes:
    """An IDX file written by hand from LeCun's description of the format."""
    return bytes([0, 0, type_byte, len(shape)]) + struct.pack(f">{len(shape)}I", *shape) + payload


def test_parse_idx_reads_unsigned_bytes_in_row_major_order():
    data = idx_bytes(0x08, (2, 2, 3), bytes(range(12)))
    array = parse_idx(data)
    assert array.dtype == np.uint8 and array.shape == (2, 2, 3)
    assert array[0].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert array[1, 1, 2] == 11


def test_parse_idx_reads_big_endian_int16():
    # 0x0102 = 258 and 0xFFFE = -2 in big-endian two's complement
    array = parse_idx(idx_bytes(0x0B, (2,), b"\x01\x02\xff\xfe"))
    assert array.tolist() == [258, -2]


def test_read_idx_decompresses_gzip(tmp_path):
    path = tmp_path / "labels-idx1-ubyte.gz"
    path.write_bytes(gzip.compress(idx_bytes(0x08, (4,), bytes([9, 0, 3, 7]))))
    assert read_idx(path).tolist() == [9, 0, 3, 7]


@pytest.mark.parametrize(
    "data, message",
    [
        (b"\x01\x00\x08\x01" + struct.pack(">I", 1) + b"\x00", "two zero bytes"),
        (b"\x00\x00\x07\x01" + struct.pack(">I", 1) + b"\x00", "type byte"),
        (b"\x00\x00\x08\x02" + struct.pack(">I", 1), "truncated header"),
        (b"\x00\x00\x08\x01" + struct.pack(">I", 3) + b"\x00\x00", "needs 11 bytes"),
    ],
)
def test_parse_idx_rejects_malformed_data(data, message):
    with pytest.raises(ValueError, match=message):
        parse_idx(data)


def write_fake_dataset(root: Path, n_train: int, n_test: int) -> tuple[np.ndarray, np.ndarray]:
    """Four IDX files of 2 × 2 images whose first pixel encodes the row (mod 256) and whose
    label is the row mod 10."""
    rng = np.random.default_rng(0)
    train = rng.integers(0, 256, (n_train, 2, 2), dtype=np.uint8)
    test = rng.integers(0, 256, (n_test, 2, 2), dtype=np.uint8)
    arrays = {
        "train_images": train,
        "train_labels": (np.arange(n_train) % 10).astype(np.uint8),
        "test_images": test,
        "test_labels": (np.arange(n_test) % 10).astype(np.uint8),
    }
    for key, name in FASHION_MNIST_FILES.items():
        array = arrays[key]
        (root / name).write_bytes(gzip.compress(idx_bytes(0x08, array.shape, array.tobytes())))
    return train, test


def test_splits_of_a_fake_dataset(tmp_path):
    train, test = write_fake_dataset(tmp_path, VALID_SIZE + 30, 7)
    splits = load_fashion_mnist(root=tmp_path)
    assert [len(splits[s]) for s in ("train", "valid", "test")] == [30, VALID_SIZE, 7]
    train_rows = [int(e.source.split("/")[1]) for e in splits["train"]]
    valid_rows = [int(e.source.split("/")[1]) for e in splits["valid"]]
    assert sorted(set(train_rows) | set(valid_rows)) == list(range(VALID_SIZE + 30))
    assert not set(train_rows) & set(valid_rows)
    assert train_rows == sorted(train_rows)  # file order
    for example, row in zip(splits["train"], train_rows, strict=True):
        assert np.array_equal(example.pixels, train[row]) and example.label == row % 10
    assert [e.label for e in splits["test"]] == [0, 1, 2, 3, 4, 5, 6]
    assert np.array_equal(splits["test"][3].pixels, test[3])
    # the validation choice is fixed: it does not change between calls; max_examples cuts train
    again = load_fashion_mnist(max_examples=12, root=tmp_path)
    assert [e.source for e in again["valid"]] == [e.source for e in splits["valid"]]
    assert [e.source for e in again["train"]] == [e.source for e in splits["train"]][:12]


def test_missing_dataset_names_the_path_and_the_package(tmp_path):
    with pytest.raises(FileNotFoundError, match="apt-get install dataset-fashion-mnist") as info:
        load_fashion_mnist(root=tmp_path)
    assert str(tmp_path / "train-images-idx3-ubyte.gz") in str(info.value)


def test_bad_max_examples_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="max_examples"):
        load_fashion_mnist(max_examples=0, root=tmp_path)


installed = all((FASHION_MNIST_DIR / name).is_file() for name in FASHION_MNIST_FILES.values())


@pytest.mark.skipif(
    not installed,
    reason=f"Fashion-MNIST not installed in {FASHION_MNIST_DIR} "
    "(apt-get install dataset-fashion-mnist)",
)
def test_installed_fashion_mnist_has_its_published_counts():
    splits = load_fashion_mnist()
    # Xiao et al. 2017: 60,000 training and 10,000 test images, 28 × 28, 6,000 / 1,000 per class
    assert len(splits["train"]) + len(splits["valid"]) == 60000
    assert len(splits["valid"]) == VALID_SIZE and len(splits["test"]) == 10000
    assert splits["test"][0].pixels.shape == (28, 28)
    train_labels = np.array([e.label for e in splits["train"] + splits["valid"]])
    test_labels = np.array([e.label for e in splits["test"]])
    assert train_labels.min() == 0 and train_labels.max() == 9
    assert np.bincount(train_labels).tolist() == [6000] * 10
    assert np.bincount(test_labels).tolist() == [1000] * 10
    cut = load_fashion_mnist(max_examples=100)
    assert len(cut["train"]) == 100 and len(cut["test"]) == 10000
