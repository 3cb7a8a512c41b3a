"""Stopping a recognition part way, when its caller has more urgent work for the model.

The model's long loops (the encoder's blocks, the decoders' token steps) call :func:`checkpoint`
between steps. Outside :func:`interruptible` it does nothing; inside, it raises
:class:`Interrupted` once the caller's ``should_stop`` says so. The pass is then abandoned and
nothing of it is kept: its caller runs the same requests again later. The inference worker uses
this to let a turn's final go before partials that are already being computed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_should_stop: ContextVar[Callable[[], bool] | None] = ContextVar("streamwhisper_should_stop", default=None)


class Interrupted(Exception):  # noqa: N818 (not an error: the caller asked for it)
    """The recognition under way was abandoned at a checkpoint; it has no result."""


@contextmanager
def interruptible(should_stop: Callable[[], bool]) -> Iterator[None]:
    """Within this block, :func:`checkpoint` raises :class:`Interrupted` when ``should_stop()``
    is true (it is called from the thread running the model, at every checkpoint)."""
    token = _should_stop.set(should_stop)
    try:
        yield
    finally:
        _should_stop.reset(token)


def checkpoint() -> None:
    """A point where the recognition under way may be abandoned (see :func:`interruptible`)."""
    should_stop = _should_stop.get()
    if should_stop is not None and should_stop():
        raise Interrupted
