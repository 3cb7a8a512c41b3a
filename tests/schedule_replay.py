"""Replaying a recorded request schedule through a real :class:`Pump` and :class:`Streamer`, without the model.

A schedule (see ``recording.schedule``) is one stream of a live run: the VAD's frame verdicts and,
in order, what happened to the stream: audio fed (chunk sizes), requests handed out, their
hypotheses coming back (or abandoned), finalize, flush and step changes. :func:`replay_schedule`
plays it back: zeros of the recorded sizes go through a VAD that repeats the recorded verdicts,
the test's scheduler checks that each request the Pump submits is the recorded one (window,
endpoint, prompt and prefix) and hands back the recorded hypothesis when the schedule says it
came back. The streaming core sees what it saw live, in the same order.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from streamwhisper.events import Event
from streamwhisper.model.recognizer import Hypothesis, HypothesisWord, RecognitionRequest
from streamwhisper.runtime.pump import Done, Pump
from streamwhisper.streaming.config import StreamingConfig
from streamwhisper.streaming.streamer import Streamer


class RecordedVad:
    """Says what the live VAD said, frame by frame (30 ms frames)."""

    frame_samples = 480

    def __init__(self, runs: Sequence[Sequence[int]]) -> None:
        self._flags = iter([bool(flag) for flag, n in runs for _ in range(n)])

    def classify(self, frames: np.ndarray) -> list[bool]:
        return [next(self._flags) for _ in range(frames.shape[0])]


class _Job:
    def __init__(self, request: RecognitionRequest, done: Done) -> None:
        self.request, self.done = request, done

    def cancel(self) -> None:
        raise AssertionError("no request is cancelled in a replay")

    def withdraw(self) -> bool:
        return False  # the recorded schedule ran it

    def hasten(self) -> None:
        pass  # the recorded schedule says when it ran


class ScheduleScheduler:
    """Takes the Pump's requests; the replay hands back their outcomes."""

    def __init__(self) -> None:
        self.submitted: list[_Job] = []

    def submit(self, request: RecognitionRequest, done: Done) -> _Job:
        job = _Job(request, done)
        self.submitted.append(job)
        return job


def hypothesis(recorded: dict[str, Any]) -> Hypothesis:
    words = tuple(HypothesisWord(w, s, e, p) for w, s, e, p in recorded["words"])
    return Hypothesis(
        text="".join(w.word for w in words),
        tokens=(),
        words=words,
        avg_logprob=recorded["avg_logprob"],
        no_speech_prob=recorded["no_speech_prob"],
        compression_ratio=recorded["compression_ratio"],
        language="en",
        temperature=recorded["temperature"],
        silent=recorded.get("silent", False),
        looping=recorded.get("looping", False),
    )


def replay_schedule(
    schedule: dict[str, Any], config: StreamingConfig | None = None, *, same_text: bool = True
) -> list[Event]:
    """The events a real Pump and Streamer emit on the recorded schedule.

    ``same_text=False``: requests must have the recorded windows, not the recorded prompt and
    prefix (a schedule whose hypotheses were edited commits other words).
    """
    events: list[Event] = []
    scheduler = ScheduleScheduler()
    streamer = Streamer(config, vad=RecordedVad(schedule["vad"]))
    pump = Pump(streamer, scheduler, events.extend)
    taken = 0  # submitted requests the schedule has seen handed out
    job: _Job | None = None
    for op, *args in schedule["ops"]:
        if op == "feed":
            for n in args[0]:
                pump.feed(np.zeros(n, dtype=np.float32))
        elif op == "request":
            assert len(scheduler.submitted) > taken, f"the recorded request {args} was not made"
            job = scheduler.submitted[taken]
            taken += 1
            r = job.request
            start, end, endpoint, prompt, prefix = args
            got = (round(r.start, 3), round(r.end, 3), r.endpoint, r.prompt_text, r.prefix_text)
            want = (round(start, 3), round(end, 3), endpoint, prompt, prefix)
            if not same_text:
                got, want = got[:3], want[:3]
            assert got == want, f"request {got} != {args}"
        elif op == "complete":
            assert job is not None
            done, job = job.done, None
            done(hypothesis(args[0]))
        elif op == "abandon":
            assert job is not None
            done, job = job.done, None
            done(None)
        elif op == "finalize":
            pump.finalize()
        elif op == "flush":
            pump.flush()
        elif op == "step":
            streamer.step_s = args[0]
        else:
            raise ValueError(f"unknown op {op!r}")
    assert len(scheduler.submitted) == taken, "requests the live run did not make"
    return events


def run_length(flags: str) -> list[list[int]]:
    return [[int(f), len(list(g))] for f, g in itertools.groupby(flags)]
