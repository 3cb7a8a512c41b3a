"""No phrase is final twice: recorded live request schedules replayed through the real Pump and Streamer.

``tests/data/schedules/listen_jfk.json`` is one stream of a live run (``listen`` on jfk, recorded
with ``tests/recording.py``; see its ``note``): the VAD's verdicts, the chunks fed, every request
handed out and the hypothesis the real model gave for it, in the order the Pump saw them.
:func:`schedule_replay.replay_schedule` plays it back without the model and checks that the
Streamer asks for exactly the recorded windows (start, end, endpoint, prompt and prefix).

The repeated phrase the client tests used to tolerate ("ask not what your country can do for
you. Ask not what your country can do for you.", tests/scoring.py before this test) is one
hypothesis in which the decoder, run past the end of the window's audio, says its sentence again.
The loop screen cut a phrase said twice only up to ``loop_max_ngram`` (8) words, so a sentence of
9 words or more went through, and at an endpoint every word of the hypothesis is final. The copy
guard cannot catch it: it compares with committed words, and the first copy is not committed yet.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from recording import repeated_run
from schedule_replay import replay_schedule

from streamwhisper.events import Final
from streamwhisper.streaming.config import PolicyConfig, StreamingConfig

SCHEDULES = Path(__file__).resolve().parent / "data" / "schedules"

# The endpoint window [0, 8.16] s of listen_jfk, decoded after the forced prefix " And so my
# fellow Americans", as the reported repeat says it: the sentence, then the sentence again. Times
# and probabilities are what the real model's alignment pass (WhisperRecognizer._finish, tiny.en
# mixed) gives these tokens in this window: the second copy is squeezed into the window's last
# 0.3 s, inside the audio, so nothing drops it as decoded into the padding; compression ratio 1.6
# and a mean word probability of 0.83, so no other screen rejects the hypothesis either. Derived on
# the a80c3be recording; the 6a96a54 one asks for the same window with the same prompt and prefix
# and the model gave it the same hypothesis to the last digit, so the times stand unchanged.
LOOPED: list[list[Any]] = [
    [" ask", 2.36, 3.86, 0.7155], [" not", 3.86, 4.64, 0.84], [" what", 4.64, 5.7, 0.9272],
    [" your", 5.7, 6.02, 0.9839], [" country", 6.02, 6.36, 0.9987], [" can", 6.36, 6.76, 0.994],
    [" do", 6.76, 7.0, 0.9978], [" for", 7.0, 7.24, 0.9923], [" you.", 7.24, 7.84, 0.992],
    [" Ask", 7.84, 8.14, 0.0002], [" not", 8.14, 8.14, 0.5953], [" what", 8.14, 8.14, 0.9108],
    [" your", 8.14, 8.14, 0.8439], [" country", 8.14, 8.14, 0.9796], [" can", 8.14, 8.14, 0.931],
    [" do", 8.14, 8.14, 0.9796], [" for", 8.14, 8.14, 0.9241], [" you.", 8.14, 8.14, 0.9055],
]  # fmt: skip


def load(name: str) -> dict[str, Any]:
    return json.loads((SCHEDULES / name).read_text())


# the settings the schedule was recorded with: a window reopened after a pause took the committed
# words in it as a forced prefix (reopened_prefix), which its requests' prefix text records, and
# every word needed two hypotheses (sure_hypotheses 2), which the prefixes record too
RECORDED = StreamingConfig(policy=PolicyConfig(reopened_prefix=True, sure_hypotheses=2))


def finals(schedule: dict[str, Any], *, same_text: bool = True) -> list[str]:
    return [e.text for e in replay_schedule(schedule, RECORDED, same_text=same_text) if isinstance(e, Final)]


def with_hypothesis(schedule: dict[str, Any], window: tuple[float, float], words: list[list[Any]]) -> dict[str, Any]:
    """The schedule with the hypothesis of the request for ``window`` replaced by ``words``.

    An utterance soon after reopens the committed words before it (``carry_gap_s``): a later
    request that starts inside ``window`` starts at one of the replaced hypothesis's words, and
    now starts where ``words`` time that word (its hypothesis stays relative to its own start).
    """
    out = copy.deepcopy(schedule)
    ops = out["ops"]
    asked = [i for i, op in enumerate(ops) if op[0] == "request" and (op[1], op[2]) == window]
    assert len(asked) == 1, window
    answer = next(i for i in range(asked[0] + 1, len(ops)) if ops[i][0] == "complete")
    recorded = ops[answer][1]["words"]
    ops[answer][1]["words"] = words
    ops[answer][1]["compression_ratio"] = 1.6154  # zlib on the looped text
    pairs = zip(recorded, words, strict=False)  # the recorded words, then what ``words`` add
    moved = {round(window[0] + a[1], 3): round(window[0] + b[1], 3) for a, b in pairs if a[0] == b[0]}
    for op in ops[answer + 1 :]:
        if op[0] == "request" and window[0] < op[1] < window[1]:
            assert op[1] in moved, f"{op} reopens at no word of the replaced hypothesis"
            op[1] = moved[op[1]]
    return out


def test_the_recorded_schedule_replays_as_it_ran_live() -> None:
    schedule = load("listen_jfk.json")
    assert finals(schedule) == schedule["live_finals"]


def test_a_sentence_said_twice_in_an_endpoint_hypothesis_is_final_once() -> None:
    schedule = load("listen_jfk.json")
    looped = with_hypothesis(schedule, (0.0, 8.16), LOOPED)
    texts = finals(looped, same_text=False)
    assert repeated_run(texts) is None, texts
    assert texts == schedule["live_finals"]
