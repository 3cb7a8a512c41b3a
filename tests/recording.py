"""Recording what the streaming core was asked and answered, to reproduce a live run without the model.

A pytest plugin (``pytest -p recording``, with ``tests/`` on ``sys.path``) and a context manager
(:func:`recording`). While on, it wraps the :class:`Streamer` and the real recogniser and logs,
per stream, in order:

- ``feed`` (chunk size, samples fed so far), ``finalize``, ``flush``, ``step`` (``step_s`` changed);
- ``request`` (what :meth:`Streamer.pending_request` handed out: window start/end, endpoint,
  prompt and prefix text, mel shape);
- ``complete`` (the hypothesis: words with times and probabilities, flags) and ``abandon``;
- the events each of these returned (finals and partials as text, with times);
- ``batch`` (the recogniser's batches: which streams' windows were served together).

Every record also carries the streamer's bookkeeping after the call (window start, commit point,
last request end, ring start/end), and each ``feed`` the VAD's frame verdicts, so that
:func:`schedule` can turn a stream into a schedule ``tests/schedule_replay.py`` plays back
without audio or model. As a plugin it writes one JSON-lines file per test to
``$STREAMWHISPER_RECORD_DIR`` (default ``/tmp/streamwhisper-records``). Options:

- ``STREAMWHISPER_RECORD_STRICT=1``: a test whose finals (per stream) say a run of
  ``STRICT_RUN`` or more normalised words twice fails (the record names the file; the audio
  fed is saved beside it as ``.npz``);
- ``STREAMWHISPER_RECORD_DELAY=s``: each batch takes up to ``s`` seconds longer (uniformly at
  random): the schedules of a slower machine without its CPU cost.

For example::

    PYTHONPATH=.:tests STREAMWHISPER_RECORD_STRICT=1 python -m pytest -p recording -m slow \
        tests/test_examples.py tests/test_listen.py tests/test_web_page.py
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamwhisper.events import Event, Final, Partial
from streamwhisper.model.recognizer import Hypothesis, RecognitionRequest
from streamwhisper.streaming.screening import normalize_word
from streamwhisper.streaming.streamer import Streamer

STRICT_RUN = 4
SAMPLE_RATE = 16000


class Recorder:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._ids: dict[int, int] = {}
        self._next = itertools.count()
        self.audio: dict[int, list[Any]] = {}  # each stream's fed chunks

    def stream_id(self, streamer: Streamer) -> int:
        with self._lock:
            if id(streamer) not in self._ids:
                self._ids[id(streamer)] = next(self._next)
            return self._ids[id(streamer)]

    def log(self, op: str, streamer: Streamer | None = None, **fields: Any) -> None:
        record: dict[str, Any] = {"op": op, "t": round(time.monotonic(), 4)}
        if streamer is not None:
            record["stream"] = self.stream_id(streamer)
            record["key"] = str(streamer._key)
            record["state"] = state(streamer)
        record.update(fields)
        with self._lock:
            self.records.append(record)

    def finals(self) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for r in self.records:
            for e in r.get("events", ()):
                if e["type"] == "final" and e["text"]:
                    out.setdefault(r["stream"], []).append(e["text"])
        return out

    def dump(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as f:
            for r in self.records:
                f.write(json.dumps(r) + "\n")


def state(s: Streamer) -> dict[str, Any]:
    return {
        "window_start": s._audio.start / SAMPLE_RATE,
        "committed_end": s._policy.committed_end,
        "last_request_end": s._cadence.last_request_end / SAMPLE_RATE,
        "ring": [s._audio._ring.start / SAMPLE_RATE, s._audio._ring.end / SAMPLE_RATE],
        "active": s._active,
        "endpoint_at": None if s._endpoint_at is None else s._endpoint_at / SAMPLE_RATE,
        "next_start": None if s._next_start is None else s._next_start / SAMPLE_RATE,
        "soft": s._policy._soft_boundary,
    }


def event_json(e: Event) -> dict[str, Any]:
    if isinstance(e, (Final, Partial)):
        return {
            "type": "final" if isinstance(e, Final) else "partial",
            "text": e.text,
            "start": e.start,
            "end": e.end,
            "endpoint": getattr(e, "endpoint", False),
        }
    return {"type": type(e).__name__}


def hypothesis_json(h: Hypothesis) -> dict[str, Any]:
    return {
        "text": h.text,
        "words": [[w.word, round(w.start, 3), round(w.end, 3), round(w.probability, 4)] for w in h.words],
        "avg_logprob": h.avg_logprob,
        "no_speech_prob": h.no_speech_prob,
        "compression_ratio": h.compression_ratio,
        "temperature": h.temperature,
        "silent": h.silent,
        "looping": h.looping,
        "language": h.language,
    }


def request_json(r: RecognitionRequest) -> dict[str, Any]:
    return {
        "start": r.start,
        "end": r.end,
        "endpoint": r.endpoint,
        "prompt_text": r.prompt_text,
        "prefix_text": r.prefix_text,
        "mel": list(r.mel.shape),
    }


@contextlib.contextmanager
def recording() -> Iterator[Recorder]:
    """Record every Streamer and WhisperRecognizer call while the block runs."""
    from streamwhisper.model.serving import WhisperRecognizer

    rec = Recorder()
    patched: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, new: Any) -> None:
        patched.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, new)

    o_feed, o_pending, o_complete = Streamer.feed, Streamer.pending_request, Streamer.complete
    o_abandon, o_finalize, o_flush = Streamer.abandon, Streamer.finalize, Streamer.flush
    o_step = Streamer.step_s
    o_recognize = WhisperRecognizer.recognize

    def feed(self: Streamer, samples: Any) -> list[Event]:
        vad = self._detector._vad
        if not hasattr(vad, "recorded"):  # the VAD's verdicts, so a replay needs no audio
            vad.recorded, classify = [], vad.classify

            def recorded_classify(frames: Any) -> Any:
                flags = classify(frames)
                vad.recorded.extend(flags)
                return flags

            vad.classify = recorded_classify
        vad.recorded.clear()
        events = o_feed(self, samples)
        flags = "".join("1" if f else "0" for f in vad.recorded)
        rec.audio.setdefault(rec.stream_id(self), []).append(np.array(samples, dtype=np.float32))
        rec.log(
            "feed",
            self,
            n=len(samples),
            flags=flags,
            events=[event_json(e) for e in events if not _vad(e)],
            vad=[type(e).__name__ for e in events if _vad(e)],
        )
        return events

    def pending_request(self: Streamer) -> RecognitionRequest | None:
        request = o_pending(self)
        if request is not None:
            rec.log("request", self, request=request_json(request))
        return request

    def complete(self: Streamer, hypothesis: Hypothesis) -> list[Event]:
        events = o_complete(self, hypothesis)
        rec.log("complete", self, hypothesis=hypothesis_json(hypothesis), events=[event_json(e) for e in events])
        return events

    def abandon(self: Streamer) -> list[Event]:
        had = self.outstanding
        events = o_abandon(self)
        rec.log(
            "abandon", self, request=None if had is None else request_json(had), events=[event_json(e) for e in events]
        )
        return events

    def finalize(self: Streamer) -> list[Event]:
        events = o_finalize(self)
        rec.log("finalize", self, speaking=self.speaking, events=[event_json(e) for e in events])
        return events

    def flush(self: Streamer) -> list[Event]:
        events = o_flush(self)
        rec.log("flush", self, events=[event_json(e) for e in events if not _vad(e)])
        return events

    def set_step(self: Streamer, value: float) -> None:
        old = self.step_s
        o_step.fset(self, value)
        if value != old:
            rec.log("step", self, step=value)

    delay = float(os.environ.get("STREAMWHISPER_RECORD_DELAY", "0") or 0)
    rng = random.Random(os.environ.get("STREAMWHISPER_RECORD_SEED"))

    def recognize(self: Any, requests: Any) -> list[Hypothesis]:
        began = time.monotonic()
        out = o_recognize(self, requests)
        if delay:  # a slower machine: other schedules, no more CPU
            time.sleep(rng.uniform(0, delay))
        rec.log(
            "batch",
            None,
            keys=[str(r.key) for r in requests],
            windows=[[r.start, r.end] for r in requests],
            seconds=round(time.monotonic() - began, 3),
        )
        return out

    patch(Streamer, "feed", feed)
    patch(Streamer, "pending_request", pending_request)
    patch(Streamer, "complete", complete)
    patch(Streamer, "abandon", abandon)
    patch(Streamer, "finalize", finalize)
    patch(Streamer, "flush", flush)
    patch(Streamer, "step_s", property(o_step.fget, set_step))
    patch(WhisperRecognizer, "recognize", recognize)
    try:
        yield rec
    finally:
        for owner, name, old in reversed(patched):
            setattr(owner, name, old)


def _vad(e: Event) -> bool:
    return not isinstance(e, (Final, Partial))


def repeated_run(texts: list[str], n: int = STRICT_RUN) -> str | None:
    """A run of ``n`` normalised words said twice in the joined ``texts``, or None."""
    words = [k for t in texts for k in (normalize_word(w) for w in t.split()) if k]
    seen: set[tuple[str, ...]] = set()
    for i in range(len(words) - n + 1):
        gram = tuple(words[i : i + n])
        if gram in seen:
            return " ".join(gram)
        seen.add(gram)
    return None


def schedule(path: Path, stream: int, note: str = "") -> dict[str, Any]:
    """One stream of a record as a compact request schedule (what tests/test_repeats.py replays):
    the VAD's frame verdicts run-length coded, and the ops in order."""
    ops: list[list[Any]] = []
    flags = ""
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r.get("stream") != stream:
            continue
        op = r["op"]
        if op == "feed":
            flags += r["flags"]
            if ops and ops[-1][0] == "feed":  # consecutive feeds: one op of their sizes
                ops[-1][1].append(r["n"])
            else:
                ops.append(["feed", [r["n"]]])
        elif op == "request":
            q = r["request"]
            ops.append(["request", q["start"], q["end"], q["endpoint"], q["prompt_text"], q["prefix_text"]])
        elif op == "complete":
            h = r["hypothesis"]
            hyp = {k: h[k] for k in ("words", "avg_logprob", "no_speech_prob", "compression_ratio", "temperature")}
            hyp.update({k: True for k in ("silent", "looping") if h[k]})
            ops.append(["complete", hyp])
        elif op == "step":
            ops.append(["step", r["step"]])
        else:  # abandon, finalize, flush
            ops.append([op])
    runs = [[int(f), len(list(g))] for f, g in itertools.groupby(flags)]
    return {"note": note, "vad": runs, "ops": ops}


# -- the pytest plugin -------------------------------------------------------------------------


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    directory = Path(os.environ.get("STREAMWHISPER_RECORD_DIR", "/tmp/streamwhisper-records"))
    with recording() as rec:
        outcome = yield
    stamp = time.strftime("%H%M%S")
    name = re.sub(r"[^\w.-]+", "_", item.nodeid)
    path = directory / f"{name}-{stamp}-{os.getpid()}.jsonl"
    rec.dump(path)
    repeats = {s: r for s, texts in rec.finals().items() if (r := repeated_run(texts))}
    if repeats:
        print(f"\nREPEAT in {path}: {repeats}")
        np.savez_compressed(path.with_suffix(".npz"), **{str(s): np.concatenate(c) for s, c in rec.audio.items()})
        if os.environ.get("STREAMWHISPER_RECORD_STRICT") and outcome.excinfo is None:
            finals = rec.finals()
            outcome.force_exception(AssertionError(f"repeated run {repeats} in finals {finals}; record {path}"))
