"""RingBuffer: absolute indexing, wrap-around, bounded preallocated storage."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamwhisper.audio.ring import RingBuffer

# An operation: ("append", n) or ("trim", offset into the held range).
ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 25)),
        st.tuples(st.just("trim"), st.integers(0, 30)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(ops=ops, capacity=st.integers(1, 20), origin=st.integers(-50, 50))
def test_matches_a_list_model(ops: list[tuple[str, int]], capacity: int, origin: int) -> None:
    ring = RingBuffer(capacity, start=origin)
    model: list[float] = []  # every item ever appended; item i has index origin + i
    start = origin
    counter = 0.0
    for op, n in ops:
        if op == "append":
            items = np.arange(counter, counter + n, dtype=np.float32)
            counter += n
            held_before = origin + len(model) - start
            dropped = ring.append(items)
            model.extend(items.tolist())
            end = origin + len(model)
            assert dropped == max(0, held_before + n - capacity)
            start = max(start, end - capacity)
        else:
            start = min(start + n, origin + len(model))
            ring.trim_before(start)
        assert (ring.start, ring.end) == (start, origin + len(model))
        assert len(ring) <= capacity
        got = ring.read(ring.start, ring.end)
        assert got.tolist() == model[ring.start - origin : ring.end - origin]


def test_read_of_a_sub_range_and_out_of_range() -> None:
    ring = RingBuffer(10)
    ring.append(np.arange(25, dtype=np.float32))  # holds 15..24
    assert (ring.start, ring.end) == (15, 25)
    assert ring.read(18, 21).tolist() == [18, 19, 20]
    assert ring.read(20, 20).shape == (0,)
    with pytest.raises(IndexError):
        ring.read(14, 20)
    with pytest.raises(IndexError):
        ring.read(20, 26)


def test_frames_of_a_given_shape() -> None:
    ring = RingBuffer(4, item_shape=(3,))
    ring.append(np.arange(18, dtype=np.float32).reshape(6, 3))
    assert (ring.start, ring.end) == (2, 6)
    np.testing.assert_array_equal(ring.read(3, 5), np.arange(9, 15).reshape(2, 3))
    with pytest.raises(ValueError):
        ring.append(np.zeros((2, 4), dtype=np.float32))


def test_storage_is_allocated_once() -> None:
    ring = RingBuffer(480_000)
    nbytes = ring.nbytes
    chunk = np.ones(16_000, dtype=np.float32)
    for _ in range(200):  # 200 s through a 30 s ring
        ring.append(chunk)
    assert ring.nbytes == nbytes == 480_000 * 4
    assert len(ring) == 480_000 and ring.end == 200 * 16_000


def test_trim_and_reset() -> None:
    ring = RingBuffer(8)
    ring.append(np.arange(6, dtype=np.float32))
    ring.trim_before(4)
    assert ring.read(4, 6).tolist() == [4, 5]
    ring.trim_before(100)  # clamped to end
    assert len(ring) == 0 and ring.start == ring.end == 6
    ring.reset(1000)
    ring.append(np.array([7.0], dtype=np.float32))
    assert ring.read(1000, 1001).tolist() == [7.0]
