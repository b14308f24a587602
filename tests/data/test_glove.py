"""GloVe 6B 50d subset: the README's counts and first vector, embedding matrices for a
vocabulary (found rows, seeded random rows with the vectors' spread, coverage), one-line errors."""

import gzip

import numpy as np
import pytest
import torch

from attnkit.data.glove import SUBSET_FILE, Coverage, embedding_matrix, load_glove
from attnkit.data.vocabulary import PAD, Vocabulary

THE = [0.418, 0.24968, -0.41242, 0.1217, 0.34527]  # README: the start of the vector of "the"


@pytest.fixture(scope="module")
def root(shared_data):
    path = shared_data / "glove-6b-50d"
    if not path.is_dir():
        pytest.skip(f"the shared data pack has no glove-6b-50d folder ({path})")
    return path


@pytest.fixture(scope="module")
def vectors(root):
    return load_glove(root)


def test_counts_and_first_vector_match_the_readme(root, vectors):
    assert len(vectors) == 28443
    assert list(vectors)[:3] == ["the", ",", "."]  # GloVe's frequency order
    assert all(v.shape == (50,) and v.dtype == np.float32 for v in vectors.values())
    assert np.allclose(vectors["the"][:5], THE, rtol=0, atol=1e-7)
    # the same file read as a path, not a directory, gives the same vectors
    again = load_glove(root / SUBSET_FILE, dim=50)
    assert np.array_equal(again["movie"], vectors["movie"])


def test_vectors_equal_the_text(root, vectors):
    with gzip.open(root / SUBSET_FILE, "rt", encoding="utf-8") as handle:
        for _, line in zip(range(200), handle, strict=False):
            word, *numbers = line.split()
            assert np.array_equal(vectors[word], np.array([float(x) for x in numbers], np.float32))


def test_embedding_matrix_rows(vectors):
    vocabulary = Vocabulary.build([["The", "movie", "movie", "zzzunknownzzz", "good"]])
    weight, coverage = embedding_matrix(vocabulary, vectors, seed=3)
    assert weight.shape == (len(vocabulary), 50) and weight.dtype == torch.float32
    assert torch.equal(weight[PAD], torch.zeros(50))
    for token in ("movie", "good"):
        assert torch.equal(weight[vocabulary.stoi[token]], torch.from_numpy(vectors[token]))
    # "The" is found lower-cased, unless asked not to
    assert torch.equal(weight[vocabulary.stoi["The"]], torch.from_numpy(vectors["the"]))
    assert coverage == Coverage(found=3, total=4, missing=("zzzunknownzzz",))
    assert coverage.fraction == 0.75 and "3/4 words (75.0 %)" in str(coverage)
    exact, exact_coverage = embedding_matrix(vocabulary, vectors, seed=3, lowercase_lookup=False)
    assert exact_coverage.missing == ("The", "zzzunknownzzz")
    assert torch.equal(
        exact[vocabulary.stoi["zzzunknownzzz"]], weight[vocabulary.stoi["zzzunknownzzz"]]
    )


def test_random_rows_are_seeded_with_the_vectors_spread(vectors):
    words = [f"notaword{i}" for i in range(2000)]
    vocabulary = Vocabulary.build([words])
    weight, coverage = embedding_matrix(vocabulary, vectors, seed=0)
    assert coverage.found == 0 and coverage.total == 2000
    sigma = np.stack(list(vectors.values())).astype(np.float64).std()
    assert abs(sigma - 0.650) < 0.001  # measured on the subset
    drawn = weight[4:].double()
    # 100,000 draws: the sample std is within 1 % of sigma (its standard error is ~0.2 %)
    assert abs(float(drawn.std()) / sigma - 1) < 0.01
    assert abs(float(drawn.mean())) < 0.01
    same, _ = embedding_matrix(vocabulary, vectors, seed=0)
    other, _ = embedding_matrix(vocabulary, vectors, seed=1)
    assert torch.equal(same, weight) and not torch.equal(other, weight)
    # the draws do not depend on the vector file: a subset of the mapping, same random rows
    reduced = {word: vectors[word] for word in list(vectors)[:100]}
    sigma_reduced = np.stack(list(reduced.values())).astype(np.float64).std()
    scaled, _ = embedding_matrix(vocabulary, reduced, seed=0)
    assert torch.allclose(scaled / sigma_reduced, weight / sigma, atol=1e-5)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("good 0.1 0.2", "line 2: expected a word and 3 numbers, got 2 value(s)"),
        ("good 0.1 0.2 0.3 0.4", "line 2: expected a word and 3 numbers, got 4 value(s)"),
        ("good 0.1 zero 0.3", "line 2: expected 3 numbers after 'good'"),
        ("the 0.1 0.2 0.3", "line 2: expected each word once, got 'the' again (first on line 1)"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, line, expected):
    path = tmp_path / "vectors.txt.gz"
    path.write_bytes(gzip.compress(f"the 1 2 3\n{line}\nbad 1 2 3\n".encode()))
    with pytest.raises(ValueError) as error:
        load_glove(path)
    message = str(error.value)
    assert message.startswith(f"{path}: ") and expected in message and "\n" not in message


def test_undecodable_line_names_file_and_line(tmp_path):
    path = tmp_path / "vectors.txt"
    path.write_bytes(b"the 1 2 3\nof 1 2 3\ncaf\xe9 1 2 3\n")  # Latin-1, not UTF-8
    with pytest.raises(ValueError) as error:
        load_glove(path)
    assert str(error.value) == f"{path}: line 3: expected UTF-8 text"


def test_truncated_gzip_missing_file_and_empty_vectors(tmp_path):
    path = tmp_path / "vectors.txt.gz"
    path.write_bytes(gzip.compress(b"the 1 2 3\n" * 100)[:30])
    with pytest.raises(ValueError, match=r"vectors\.txt\.gz: expected a complete gzip file"):
        load_glove(path)
    with pytest.raises(FileNotFoundError, match=SUBSET_FILE.replace(".", r"\.")):
        load_glove(tmp_path)
    with pytest.raises(ValueError, match="vectors must hold at least one word"):
        embedding_matrix(Vocabulary.build([["a"]]), {})
    plain = tmp_path / "plain.txt"
    plain.write_text("a 1 2\nb 3 4\n")
    assert load_glove(plain)["b"].tolist() == [3.0, 4.0]
    with pytest.raises(ValueError, match=r"line 1: expected a word and 5 numbers"):
        load_glove(plain, dim=5)
