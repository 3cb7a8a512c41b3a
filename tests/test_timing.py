"""Word-timing helpers: the vectorised DTW against the reference recurrence, cell by cell; the
median filter's sorting network against sorting."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from streamwhisper.model.timing import SORT7, WordTiming, dtw, median_filter, merge_punctuations


def reference_dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """openai-whisper's dtw_cpu recurrence and backtrace, one cell at a time."""
    n, m = cost.shape
    acc = np.full((n + 1, m + 1), np.inf)
    trace = np.full((n + 1, m + 1), -1)
    acc[0, 0] = 0.0
    for j in range(1, m + 1):
        for i in range(1, n + 1):
            c0, c1, c2 = acc[i - 1, j - 1], acc[i - 1, j], acc[i, j - 1]
            if c0 < c1 and c0 < c2:
                c, t = c0, 0
            elif c1 < c0 and c1 < c2:
                c, t = c1, 1
            else:
                c, t = c2, 2
            acc[i, j] = cost[i - 1, j - 1] + c
            trace[i, j] = t
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j, path = n, m, []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        if trace[i, j] == 0:
            i, j = i - 1, j - 1
        elif trace[i, j] == 1:
            i -= 1
        else:
            j -= 1
    rows, cols = np.array(path[::-1]).T
    return rows, cols


@pytest.mark.parametrize("seed", range(40))
def test_dtw_takes_the_reference_path(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(1, 25)), int(rng.integers(1, 120))
    cost = -rng.random((n, m)).astype(np.float32).astype(np.float64)  # as find_alignment passes it
    rows, cols = dtw(cost)
    expected_rows, expected_cols = reference_dtw(cost)
    assert rows.tolist() == expected_rows.tolist()
    assert cols.tolist() == expected_cols.tolist()


def test_dtw_path_is_monotonic_and_complete() -> None:
    cost = -np.random.default_rng(1).random((12, 80))
    rows, cols = dtw(cost)
    assert (rows[0], cols[0]) == (0, 0) and (rows[-1], cols[-1]) == (11, 79)
    steps = np.stack([np.diff(rows), np.diff(cols)], axis=1)
    assert {tuple(s) for s in steps} <= {(1, 1), (1, 0), (0, 1)}


def test_sort7_network_sorts_every_input() -> None:
    """By the 0-1 principle, a comparator network that sorts every 0/1 input sorts everything."""
    for bits in itertools.product((0, 1), repeat=7):
        values = list(bits)
        for layer in SORT7:
            for a, b in layer:
                values[a], values[b] = min(values[a], values[b]), max(values[a], values[b])
        assert values == sorted(bits), bits


@pytest.mark.parametrize("width", [7, 5])
def test_median_filter_equals_the_median_of_each_sorted_window(width: int) -> None:
    x = torch.randn(3, 11, 40, generator=torch.Generator().manual_seed(width))
    x[0, 0, :10] = 0.5  # ties
    pad = width // 2
    windows = F.pad(x[None], (pad, pad, 0, 0), mode="reflect")[0].unfold(-1, width, 1)
    assert torch.equal(median_filter(x, width), windows.sort(dim=-1).values[..., pad])
    assert torch.equal(median_filter(x[..., :2], width), x[..., :2])  # too short to filter


def test_merged_punctuation_keeps_its_probability_on_the_word() -> None:
    """The closing mark's own probability (the decoder's certainty that a sentence ends there)
    is kept beside the word's: a pause final drops a full stop it doubts."""
    alignment = [
        WordTiming(" blocks", [1], 0.0, 0.5, 0.9),
        WordTiming(".", [2], 0.5, 0.5, 0.4),
        WordTiming(" Then", [3], 0.6, 0.9, 0.8),
    ]
    merge_punctuations(alignment)
    assert [(t.word, t.probability, t.mark_probability) for t in alignment] == [
        (" blocks.", 0.9, 0.4),
        ("", 0.4, 1.0),
        (" Then", 0.8, 1.0),
    ]
