"""bertviz export and PNG figures."""

import pytest
import torch

from attnkit.interpret import plot_alignment, plot_heads, plot_heatmap, to_bertviz

PNG = b"\x89PNG\r\n\x1a\n"


def test_bertviz_format_per_layer_one_batch():
    maps = [torch.rand(3, 2, 4, 4, dtype=torch.float64), torch.rand(3, 2, 4, 4)]
    out = to_bertviz(maps, batch_index=1)
    assert len(out) == 2
    assert all(t.shape == (1, 2, 4, 4) and t.dtype == torch.float32 for t in out)
    assert torch.equal(out[0][0], maps[0][1].float())
    assert to_bertviz({"a": torch.rand(4, 4)})[0].shape == (1, 1, 4, 4)
    with pytest.raises(ValueError, match="batch_index 5 out of range"):
        to_bertviz(maps, batch_index=5)


def test_heatmap_png_with_token_labels(tmp_path):
    path = tmp_path / "map.png"
    fig = plot_heatmap(torch.eye(3), ["a", "b", "c"], ["x", "y", "z"], path, title="t")
    assert path.read_bytes().startswith(PNG)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["x", "y", "z"]
    with pytest.raises(ValueError, match="needs 3 labels, got 2"):
        plot_heatmap(torch.eye(3), ["a", "b"])


def test_alignment_figure_target_rows_source_columns_values_in_cells(tmp_path):
    weights = torch.tensor([[0.94, 0.02, 0.04], [0.11, 0.01, 0.88], [0.03, 0.95, 0.02]])
    path = tmp_path / "align.png"
    fig = plot_alignment(weights, ["I", "love", "you"], ["je", "t'", "aime"], path)
    assert path.read_bytes().startswith(PNG)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["I", "love", "you"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["je", "t'", "aime"]
    cells = [t.get_text() for t in ax.texts]
    assert len(cells) == 9 and cells[0] == "0.94" and cells[5] == "0.88"


def test_head_grid(tmp_path):
    path = tmp_path / "heads.png"
    fig = plot_heads(torch.rand(1, 5, 3, 3), ["a", "b", "c"], path, columns=2)
    assert path.read_bytes().startswith(PNG)
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == [f"head {h}" for h in range(5)]
    with pytest.raises(ValueError, match=r"\[H, M, N\]"):
        plot_heads(torch.rand(3, 3))
