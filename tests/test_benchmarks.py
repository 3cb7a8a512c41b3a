"""The benchmarks' own logic, without the model: the summary they print and the conversational set."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import numpy as np
import pytest

from benchmarks.conversation import SR, compose, speaker
from benchmarks.offline_accuracy import accuracy_report
from benchmarks.resume import Run, best_match
from benchmarks.scoring import Clip, normalize_with_marks, word_error_rate
from benchmarks.soak import drift
from benchmarks.streaming import summarize
from benchmarks.ttfs import DEEPGRAM, FLUX, GAP_S, NATIVE, _finalized, auto_stagger
from streamwhisper.bench import StreamRun, score_latency
from streamwhisper.events import Final, Word


def clip(clip_id: str, seconds: float = 1.0, category: str = "read_en", reference: str = "") -> Clip:
    return Clip(clip_id, Path(f"{clip_id}.wav"), seconds, reference or clip_id, "", category, "en")


def test_latency_takes_the_offline_time_of_a_word_only_when_it_is_the_same_word() -> None:
    """A streamed word's audio end is its offline twin's, unless the alignment paired it with the
    same word said seconds away; then its own streamed time stands."""
    said = [Word(" so", 1.0, 1.2, 0.9), Word(" I", 1.3, 1.4, 0.9), Word(" left.", 1.5, 1.9, 0.9)]
    late = Word(" I", 53.2, 53.5, 0.9)  # the stream's own "I", far from the offline one
    timeline = [(2.6, Final("so I left.", 1.0, 1.9, tuple(said), 0)), (54.0, Final("I", 53.2, 53.5, (late,), 1))]
    offline = [("so", 1.1), ("I", 1.5), ("left.", 2.1), ("I", 38.7)]
    run = StreamRun(60.0)
    score_latency(run, timeline, offline)
    assert run.final_words == 4
    assert run.final_latency == pytest.approx([1.5, 1.1, 0.5, 0.5])  # 54.0 - 53.5, not 54.0 - 38.7
    # each word with the audio end its latency counts from (for streaming.py --late)
    assert [(w, round(end, 2), at) for w, end, at in run.final_times][-2:] == [(" left.", 2.1, 2.6), (" I", 53.5, 54.0)]


def test_bench_summary_splits_the_real_time_factor_of_speech_and_non_speech() -> None:
    clips = [clip("a", 100.0, "longform"), clip("b", 100.0, "nonspeech"), clip("c", 10.0)]
    runs = [StreamRun(100.0, compute_s=45.0), StreamRun(100.0, compute_s=10.0), StreamRun(10.0, compute_s=4.0)]
    summary = summarize(clips, runs)
    assert summary["rtf"] == pytest.approx(59.0 / 210.0, abs=1e-4)
    assert summary["speech_rtf"] == pytest.approx(49.0 / 110.0, abs=1e-4)
    assert summary["nonspeech_rtf"] == pytest.approx(0.1)
    assert "speech_rtf" not in summarize(clips[:1], runs[:1])


def test_bench_summary_gives_each_category_its_own_figures() -> None:
    """Over several categories (conversations and hard) each gets its WER and latency too."""
    clips = [clip("a", 10.0, "hard", "red green blue black"), clip("b", 10.0, "conversation_test", "white pink")]
    runs = [
        StreamRun(10.0, stream_text="red green", offline_text="red green blue black", final_latency=[3.0, 4.0]),
        StreamRun(10.0, stream_text="white pink", offline_text="white", final_latency=[0.5, 1.0]),
    ]
    summary = summarize(clips, runs)
    assert summary["wer"] == pytest.approx(2 / 6, abs=1e-4)
    hard, conversation = summary["by_category"]["hard"], summary["by_category"]["conversation_test"]
    assert (hard["wer"], hard["offline_wer"], hard["stream_edits"]["del"]) == (0.5, 0.0, 2)
    assert (conversation["wer"], conversation["offline_wer"]) == (0.0, 0.5)
    assert hard["final_latency_p95"] > 3.0 > conversation["final_latency_p95"]
    assert "by_category" not in summarize(clips[:1], runs[:1])


def test_sentence_marks_score_as_words() -> None:
    """A mark at a breath is an insertion, a missed one a deletion; a decimal point is no mark."""
    assert normalize_with_marks("It costs 3.5 dollars. Yes!") == "it costs $3.5 . yes ."
    reference = "Printing in the only sense. With which we are concerned."
    at_breath = "Printing. In the only sense. With which we are concerned."
    assert word_error_rate([reference], [at_breath]) == 0.0
    assert word_error_rate([reference], [at_breath], normalize_with_marks) == pytest.approx(1 / 12)
    assert word_error_rate(
        [reference], ["Printing in the only sense with which we are concerned"], normalize_with_marks
    ) == (pytest.approx(2 / 12))


def test_clips_of_one_reader_share_a_speaker() -> None:
    assert speaker("hard_voice_mfa_creaky") == speaker("hard_spont_mfa_cold_corpus") == speaker("hard_voice_whisper")
    assert speaker("en_lj_LJ001-0001") == speaker("en_lj_LJ050-0131") != speaker("en_ps_cards_001")
    reader_1272 = speaker("en_ls_dev_1272-128104-0000")
    assert reader_1272 == speaker("en_ls_dev_1272-141231-0002") != speaker("en_ls_test_61-70968-0000")
    assert speaker("en_jfk") == "en_jfk"


def _compose(seed: int, long_silence: bool = True):  # type: ignore[no-untyped-def]
    ids = [f"en_lj_LJ001-000{i}" for i in range(4)] + [f"en_ps_cards_00{i}" for i in range(3)] + ["en_jfk"]
    clips = [clip(i, reference=f"words of {i}") for i in ids]
    sounds = {name: np.full(10 * SR, 0.01, np.float32) for name in _sound_names()}
    return clips, compose(clips, sounds, lambda c: np.full(SR, 0.1, np.float32), random.Random(seed), "s", long_silence)


def _sound_names() -> set[str]:
    from benchmarks import conversation

    return {conversation.ROOM_TONE, *conversation.SNR_NOISE, *(s for g in conversation.GAPS.values() for s in g)}


def test_a_composed_stream_holds_every_utterance_once_between_pauses() -> None:
    clips, stream = _compose(7)
    spoken = [f"words of {c.id}" for c in clips]
    # every clip once, its reference in the order it is heard
    assert sorted(stream.reference.replace("words of ", "\n").split()) == sorted(c.id for c in clips)
    assert all(text in stream.reference for text in spoken)
    heard = [n for n in stream.notes.split() if n.startswith("en_")]
    assert sorted(n.split("@")[0] for n in heard) == sorted(c.id for c in clips)
    # 8 one-second utterances, pauses and a long silence: longer than the speech alone
    assert len(stream.audio) > (8 + 15) * SR and np.isfinite(stream.audio).all()
    assert "silence" in stream.notes


def test_composition_is_seeded() -> None:
    (_, a), (_, b), (_, c) = _compose(3), _compose(3), _compose(4)
    assert a.notes == b.notes and np.array_equal(a.audio, b.audio)
    assert a.notes != c.notes


def test_offline_accuracy_sums_each_engine_over_its_category() -> None:
    references = {"read_en/a": "the cat sat", "read_en/b": "on the mat", "hard/c": "hello there"}
    rows = [
        {
            "engine": "ours",
            "model": "tiny.en",
            "compute": "mixed",
            "audio": "read_en/a",
            "text": "the cat sat",
            "audio_s": 3.0,
            "median_wall_s": 0.5,
        },
        {
            "engine": "ours",
            "model": "tiny.en",
            "compute": "mixed",
            "audio": "read_en/b",
            "text": "on a mat",
            "audio_s": 3.0,
            "median_wall_s": 0.5,
        },
        {
            "engine": "faster-whisper",
            "model": "tiny.en",
            "compute": "int8",
            "audio": "read_en/a",
            "text": "the cat",
            "audio_s": 3.0,
            "median_wall_s": 1.0,
        },
        {
            "engine": "ours",
            "model": "tiny.en",
            "compute": "mixed",
            "audio": "talk60",
            "text": "unscored",
            "audio_s": 60.0,
            "median_wall_s": 3.0,
        },
        {"engine": "ours", "model": "tiny.en", "compute": "mixed", "audio": "hard/c", "error": "exit 1"},
    ]
    report = accuracy_report(rows, references)
    assert "accuracy over read_en" in report and "accuracy over hard" not in report  # a failed row is not scored
    lines = {
        line.split("|")[1].strip() + " " + line.split("|")[3].strip(): line
        for line in report.splitlines()
        if line.startswith("| ours") or line.startswith("| faster")
    }
    ours = [cell.strip() for cell in lines["ours mixed"].split("|")]
    assert ours[4:7] == ["2", "16.67", "6.0"]  # 1 edit in 6 words; 6 s of audio in 1 s
    fw = [cell.strip() for cell in lines["faster-whisper int8"].split("|")]
    assert fw[4:7] == ["1", "33.33", "3.0"]


def test_a_cut_run_may_read_two_places_as_two_different_uninterrupted_runs_did() -> None:
    """CI's failure: the uninterrupted runs read "am i ... ask" or "my ... asked"; a run cut at word
    2 read "my ... ask", which loses no word (against the second) and differs from the first only
    inside the cut's window. A word lost at the cut still counts against every run."""

    def run(text: str, cut_s: float | None = None) -> Run:
        words = tuple(Word(f" {w}", i * 0.5, i * 0.5 + 0.4, 0.9) for i, w in enumerate(text.split()))
        return Run([Final(text, 0.0, words[-1].end, words, 0)], cut_s)

    baselines = [run("and so am i fellow americans ask not"), run("and so my fellow americans asked not")]
    both = best_match(baselines, run("and so my fellow americans ask not", cut_s=1.3))
    assert (both.duplicated, both.lost, both.outside) == (0, 0, [])
    lost = best_match(baselines, run("and so fellow americans ask not", cut_s=1.3))
    assert (lost.duplicated, lost.lost, lost.outside) == (0, 1, [])
    far = best_match(baselines, run("and so my fellow americans asked", cut_s=1.3))
    assert far.lost == 1 and far.outside == ["delete ['not'] -> [] at word 6 (cut at word 2)"]


def test_ttfs_clients_start_a_mean_turn_apart_over_their_number() -> None:
    """The rotated clients' last turns would all end together (each says every clip); started a
    mean turn / N apart, their turn ends spread as independent sessions' do."""
    clips = [
        (np.zeros(16000 * 2, np.float32), np.zeros(800, np.float32), 1.5),
        (np.zeros(16000 * 4, np.float32), np.zeros(0, np.float32), 3.5),
    ]
    turn_s = (2.05 + 4.0) / 2 + GAP_S
    assert auto_stagger(clips, 8) == pytest.approx(turn_s / 8)
    assert auto_stagger(clips, 1) == pytest.approx(turn_s)


def _native(at: float, endpoint: bool, end: float) -> tuple[float, dict]:
    return at, {"type": "final", "endpoint": endpoint, "words": [{"word": "was.", "start": end - 0.3, "end": end}]}


def _ttfs(live, came: list[tuple[float, dict]], asked: float, speech_end: float) -> float:
    async def run() -> float:
        arrivals: asyncio.Queue[tuple[float, dict]] = asyncio.Queue()
        for message in came:
            arrivals.put_nowait(message)
        return await _finalized(live, arrivals, asked, speech_end)

    return asyncio.run(run())


def test_ttfs_times_the_answer_or_counts_a_turn_the_servers_endpoint_ended_first_as_zero() -> None:
    """A finalize that came after the server's own endpoint final (holding the turn's last word)
    has nothing to answer: the client had the text, 0 s. A final before the finalize that is not
    the turn's end (a pause's, or an earlier utterance's) is no answer: the finalize's is timed."""
    # the server's VAD ended the turn 80 ms before the client's finalize (speech end 41.39 s)
    assert _ttfs(NATIVE, [_native(19.11, True, 41.28)], asked=19.19, speech_end=41.39) == 0.0
    answer = _native(19.5, True, 41.3)
    # an earlier utterance's endpoint final, or a final at a pause, then the finalize's answer
    for early in (_native(18.0, True, 39.0), _native(19.11, False, 41.28)):
        assert _ttfs(NATIVE, [early, answer], asked=19.19, speech_end=41.39) == pytest.approx(0.31)
    # Deepgram: a speech_final may be a pause's (endpointing=25): only from_finalize answers
    words = {"alternatives": [{"words": [{"word": "was", "end": 41.28}]}]}
    pause = (19.11, {"type": "Results", "is_final": True, "speech_final": True, "channel": words})
    answered = (19.4, {"type": "Results", "is_final": True, "from_finalize": True, "channel": words})
    assert _ttfs(DEEPGRAM, [pause, answered], asked=19.19, speech_end=41.39) == pytest.approx(0.21)
    # Flux: an EndOfTurn is the turn's end
    turn = (19.11, {"type": "TurnInfo", "event": "EndOfTurn", "words": [{"word": "was", "end": 41.28}]})
    assert _ttfs(FLUX, [turn], asked=19.19, speech_end=41.39) == 0.0


def test_soak_drift_tells_a_leak_from_a_plateau() -> None:
    """RSS that rises to a plateau during warm-up has no drift after it; RSS that grows by
    100 MB an hour throughout shows that slope and a later fifth above the second."""
    minutes = np.arange(0, 40, 5 / 60)
    seconds = minutes * 60
    plateau = 800 - 300 * np.exp(-minutes) + np.random.default_rng(0).normal(0, 2, len(minutes))
    flat = drift(list(zip(seconds, plateau, strict=True)))
    assert abs(flat["slope_second_half_mb_per_hour"]) < 10
    assert abs(flat["last_fifth_mb"] - flat["second_fifth_mb"]) < 3
    leak = drift(list(zip(seconds, 600 + 100 * minutes / 60, strict=True)))
    assert leak["slope_second_half_mb_per_hour"] == pytest.approx(100, abs=0.5)
    assert leak["last_fifth_mb"] - leak["second_fifth_mb"] == pytest.approx(100 * 24 / 60, abs=2)
