"""A fixed-capacity ring buffer addressed by absolute index.

Items (samples, or mel frames with ``item_shape=(n_mels,)``) keep the index they had in the
stream, so callers speak in stream positions and never in buffer offsets. The storage is
allocated once; memory is flat however long the stream runs.
"""

from __future__ import annotations

import numpy as np


class RingBuffer:
    """Holds the items of the stream in ``[start, end)``, at most ``capacity`` of them.

    Appending beyond the capacity drops the oldest items (``start`` advances); callers that must
    not lose audio trim at their own boundaries before that happens.
    """

    def __init__(
        self,
        capacity: int,
        item_shape: tuple[int, ...] = (),
        dtype: type[np.floating] = np.float32,
        start: int = 0,
    ) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self._data = np.zeros((capacity, *item_shape), dtype=dtype)
        self._capacity = capacity
        self._item_shape = item_shape
        self._start = start
        self._end = start

    @property
    def capacity(self) -> int:
        """Maximum number of items held."""
        return self._capacity

    @property
    def start(self) -> int:
        """Absolute index of the oldest item held."""
        return self._start

    @property
    def end(self) -> int:
        """Absolute index one past the newest item (the number of items ever appended)."""
        return self._end

    @property
    def nbytes(self) -> int:
        """Bytes of the preallocated storage (constant)."""
        return int(self._data.nbytes)

    def __len__(self) -> int:
        return self._end - self._start

    def append(self, items: np.ndarray) -> int:
        """Append items at ``end``; returns how many of the oldest items were dropped to fit."""
        items = np.asarray(items, dtype=self._data.dtype)
        if items.shape[1:] != self._item_shape:
            raise ValueError(f"items of shape {items.shape[1:]}, expected {self._item_shape}")
        n = int(items.shape[0])
        dropped = max(0, len(self) + n - self._capacity)
        if n > self._capacity:  # only the newest items can survive
            items = items[-self._capacity :]
            self._end += n - self._capacity
            n = self._capacity
        pos = self._end % self._capacity
        first = min(n, self._capacity - pos)
        self._data[pos : pos + first] = items[:first]
        self._data[: n - first] = items[first:]
        self._end += n
        self._start = max(self._start, self._end - self._capacity)
        return dropped

    def read(self, start: int, end: int) -> np.ndarray:
        """A copy of items ``[start, end)``; IndexError outside ``[self.start, self.end)``."""
        if not self._start <= start <= end <= self._end:
            raise IndexError(f"[{start}, {end}) outside held [{self._start}, {self._end})")
        n = end - start
        pos = start % self._capacity
        first = min(n, self._capacity - pos)
        out = np.empty((n, *self._item_shape), dtype=self._data.dtype)
        out[:first] = self._data[pos : pos + first]
        out[first:] = self._data[: n - first]
        return out

    def trim_before(self, index: int) -> None:
        """Forget items before ``index`` (clamped to ``[start, end]``)."""
        self._start = min(max(self._start, index), self._end)

    def reset(self, start: int) -> None:
        """Forget everything; the next item appended gets index ``start``."""
        self._start = self._end = start
