"""Whisper's seek loop without the model: scripted window decodings in, windows and segments out."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamwhisper.audio.mel import log_mel
from streamwhisper.model.recognizer import HypothesisWord
from streamwhisper.model.tokenizer import get_tokenizer
from streamwhisper.transcribe import TranscribeOptions
from streamwhisper.whisper_input import N_SAMPLES
from streamwhisper.window_loop import Segment, WindowLoop, median_word_s, words_by_text

TOKENIZER = get_tokenizer(False, language="en", task="transcribe")
TS = TOKENIZER.timestamp_begin


@dataclass
class Decoded:
    tokens: list[int]
    avg_logprob: float = -0.2
    no_speech_prob: float = 0.01
    compression_ratio: float = 1.2
    temperature: float = 0.0


def stamp(seconds: float) -> int:
    return TS + round(seconds / 0.02)


def loop_over(seconds: float, **options: object) -> WindowLoop:
    audio = np.random.default_rng(0).normal(0, 0.1, int(seconds * 16000)).astype(np.float32)
    return WindowLoop(audio, log_mel(audio, 80, padding=N_SAMPLES), TOKENIZER, TranscribeOptions(**options))


def test_windows_advance_to_the_last_complete_segment_and_carry_the_text_as_prompt() -> None:
    loop = loop_over(45.0, initial_prompt="Glossary: Kennedy.")
    first = loop.next_window()
    assert first is not None and (first.seek, first.frames, first.mel.shape) == (0, 3000, (80, 3000))
    assert TOKENIZER.decode(list(first.prompt)) == " Glossary: Kennedy."
    hello, world, cut = TOKENIZER.encode(" Hello there."), TOKENIZER.encode(" And the world."), TOKENIZER.encode(" Cut")
    tokens = [stamp(0), *hello, stamp(2.0), stamp(2.5), *world, stamp(26.0), stamp(27.0), *cut]
    added = loop.complete(first, Decoded(tokens))
    assert [(s.start, s.end, s.text) for s in added] == [(0.0, 2.0, " Hello there."), (2.5, 26.0, " And the world.")]
    second = loop.next_window()
    assert second is not None and second.seek == 2600, "the unfinished segment is decoded again"
    assert second.frames == 1900
    assert TOKENIZER.decode(list(second.prompt)) == " Glossary: Kennedy. Hello there. And the world."
    assert loop.complete(second, Decoded([], no_speech_prob=0.9, avg_logprob=-2.0)) == []  # silence
    assert loop.next_window() is None
    assert loop.result("en").text == " Hello there. And the world."


def test_a_hot_fallback_resets_the_prompt() -> None:
    loop = loop_over(40.0)
    window = loop.next_window()
    assert window is not None
    loop.complete(window, Decoded([stamp(0), *TOKENIZER.encode(" Noise."), stamp(3.0)], temperature=0.8))
    following = loop.next_window()
    assert following is not None and following.prompt == ()


def test_digital_silence_is_skipped_without_a_window() -> None:
    audio = np.zeros(40 * 16000, dtype=np.float32)
    audio[35 * 16000 :] = 0.1
    loop = WindowLoop(audio, log_mel(audio, 80, padding=N_SAMPLES), TOKENIZER, TranscribeOptions())
    window = loop.next_window()
    assert window is not None and window.seek == 3000


def test_no_segment_comes_from_the_silence_padding_the_last_window() -> None:
    """A decoder looping on the padding after the audio (tiny.en int8 on a radio recording: "Come
    on." a second up to 12 s past its end) adds nothing there; a segment running into it ends
    with the audio."""
    loop = loop_over(10.0)
    window = loop.next_window()
    assert window is not None and window.seconds == 10.0
    come_on = TOKENIZER.encode(" Come on.")
    tokens = [stamp(8.0), *come_on, stamp(9.0), stamp(9.0), *come_on, stamp(10.5)]
    tokens += [stamp(10.5), *come_on, stamp(11.5), stamp(11.5), *come_on, stamp(12.5)]
    added = loop.complete(window, Decoded(tokens))
    assert [(s.start, s.end, s.text) for s in added] == [(8.0, 9.0, " Come on."), (9.0, 10.0, " Come on.")]
    assert loop.next_window() is None
    assert loop.result("en").text == " Come on. Come on."


def test_words_go_to_the_segments_that_spell_them_and_a_cut_segment_loses_its_words() -> None:
    segments = [
        Segment(0.0, 1.0, " And so, my fellow", [], 0, 0, 0, 0),
        Segment(1.0, 2.0, " Americans, ask not.", [], 0, 0, 0, 0),
    ]
    words = [
        HypothesisWord(w, i * 0.3, i * 0.3 + 0.2, 0.9)
        for i, w in enumerate([" And", " so,", " my", " fellow", " Americans,", " ask", " not.", " What"])
    ]
    per_segment = words_by_text(segments, words, offset=30.0)
    assert [[w["word"] for w in ws] for ws in per_segment] == [
        [" And", " so,", " my", " fellow"],
        [" Americans,", " ask", " not."],
    ]
    assert per_segment[1][0]["start"] == 31.2
    assert median_word_s([0.2, 0.0, 0.4, 2.0]) == 0.4
    assert median_word_s([]) == 0.0
