"""The bounded queue of messages waiting for one client, drained by the session's writer task."""

from __future__ import annotations

import asyncio
from collections import deque


class Outbox:
    """Messages waiting for one client. Bounded; a waiting partial is replaced by a newer one.

    When a message would pass ``limit``, it is dropped and :attr:`overflowed` is set: the client
    does not read, and the session ends it.
    """

    def __init__(self, limit: int) -> None:
        self._items: deque[tuple[bool, str]] = deque()
        self._limit = limit
        self.peak = 0  # most messages ever waiting
        self._closed = False
        self._ready = asyncio.Event()
        self.overflowed = asyncio.Event()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, text: str, replaceable: bool = False) -> None:
        if replaceable and self._items and self._items[-1][0]:
            self._items[-1] = (True, text)
            return
        if len(self._items) >= self._limit:
            self.overflowed.set()
            return
        self._items.append((replaceable, text))
        self.peak = max(self.peak, len(self._items))
        self._ready.set()

    def close(self) -> None:
        """No more messages: :meth:`get` returns None once the queue is empty."""
        self._closed = True
        self._ready.set()

    async def get(self) -> str | None:
        while not self._items:
            if self._closed:
                return None
            self._ready.clear()
            await self._ready.wait()
        return self._items.popleft()[1]
