"""Frozen, validated settings of the streaming core: the commit policy and the Streamer.

The VAD's settings (:class:`~streamwhisper.audio.vad.VadConfig`) live beside the VAD;
:class:`StreamingConfig` holds them as its ``vad`` table.

Every value is a default that works on two CPU cores with the tiny/base models; the runtime may
change the step at run time (``Streamer.step_s``) but never these objects. Invalid values raise
:class:`~streamwhisper.errors.ConfigError` at construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streamwhisper.audio.vad import VadConfig
from streamwhisper.errors import ConfigError


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


@dataclass(frozen=True)
class PolicyConfig:
    """Hypothesis guards, LocalAgreement boundary handling and prompt conditioning."""

    # Silence and loops are the recogniser's verdicts (its fallback rule marks the hypothesis);
    # these guards are the policy's own, stricter than offline Whisper.
    # Below this average log-probability a hypothesis is dropped whatever no_speech_prob says;
    # Whisper retries at a higher temperature below -1.0, so -1.5 is "even the retry failed".
    logprob_floor: float = -1.5
    # Stricter than offline Whisper, since a live caption can't be taken back: a window the model
    # itself calls non-speech, or whose words it barely believes, is dropped whatever its text.
    no_speech_hard_threshold: float = 0.6
    min_mean_word_probability: float = 0.5
    # ... except in an utterance's endpoint hypothesis without a prefix whose no_speech_prob is
    # below this (0: never): no later window hears its audio, and the model says it is speech
    # ("Ten:0.45 of:0.99 clothes.:0.27", a 1 s turn after a pause; nonspeech's: 0.097 and up).
    endpoint_doubt_max_no_speech: float = 0.05
    # Whisper's stock hallucinations (video outros from its training data, written on birdsong,
    # music and noise): a hypothesis that is nothing but one of these phrases (compared
    # case-folded, without punctuation) is dropped. Said inside longer speech, they are kept.
    stock_phrases: tuple[str, ...] = (
        "thanks for watching",
        "thank you for watching",
        "thanks for watching and see you next time",
        "please subscribe",
        "like and subscribe",
        "subtitles by the amara org community",
    )
    # A hypothesis sampled at a fallback temperature (its window decoded too unlikely at
    # temperature 0: music, noise, mumbling) with fewer words than this is dropped unless the
    # previous hypothesis said them: a short sampled phrase is Whisper's prior ("Thank you."
    # on music), not the audio. 0 disables.
    sampled_min_words: int = 4
    # An n-gram (n <= loop_max_ngram) repeated loop_min_repeats times in a row is a decoding loop
    # (unigrams need one more repeat: "no no no" is speech); the hypothesis is cut after its
    # first occurrence.
    loop_max_ngram: int = 8
    loop_min_repeats: int = 3
    # ... but a phrase of loop_long_ngram words or more repeated twice in a row is a loop too
    # (a decoder running past the end of short audio says its sentence again); 0 disables.
    loop_long_ngram: int = 3
    # Words at the start of a new window that repeat the last committed words (up to
    # dedupe_max_ngram of them, within dedupe_window_s of the commit point) are dropped.
    dedupe_max_ngram: int = 5
    dedupe_window_s: float = 1.0
    # LocalAgreement: a word agreed by two consecutive hypotheses is committed when it ends at
    # least commit_margin_s before its window's end and the window is min_commit_window_s long.
    # 0.5 at a 0.5 s step: a word is committed once two hypotheses agree on it with half a
    # second of audio after it (0.3: longform WER 0.4 points worse at that step).
    commit_margin_s: float = 0.5
    # ... but a word the model is sure of (probability >= sure_probability) with another word
    # after it in the hypothesis needs only sure_margin_s: a word cut at the window's end is
    # the hypothesis's last word, or a doubted one.
    sure_margin_s: float = 0.15
    sure_probability: float = 0.9
    # How many hypotheses must say such a sure word: 1 (the first that says it commits it) or 2
    # (agreement, as for any other word). 1 with sure_margin_s 0.15 against 2 with 0.3, replayed:
    # conversation_tune final p50 1.10 -> 1.02 s, WER 26.3 -> 24.8 %; held out, conversation_test
    # 1.04 -> 0.96 s and hard 1.18 -> 1.14 s, WER within two edits (docs/tuning-log.md).
    sure_hypotheses: int = 1
    min_commit_window_s: float = 2.0
    # A word without agreement that the hypothesis before heard too (in another form) is committed
    # as the latest hypothesis says it once it ends stall_commit_s before the window's end:
    # hypotheses that kept disagreeing (radio, noise) held it, and every word after it, to the
    # endpoint (hard's Apollo 11 clip). 0 disables. Tuned on conversation_tune (1.2, 1.5).
    stall_commit_s: float = 1.5
    # A pause final (``StreamingConfig.pause_final``) ends with a full stop only when the decoder
    # is sure of it (sure_probability, not tuned): a window that ends at a breath ends with a full
    # stop. A doubted one waits for the endpoint (``eager_pause_finals``: is dropped).
    pause_stop_min_probability: float = 0.9
    # A word the model doubts (probability below commit_min_probability; 0 disables) needs a
    # third hypothesis in a row: tiny.en streamed longform WER 6.6 % instead of 6.8 % at 0.6,
    # but final latency p95 5.2 s instead of 2.8 s, so it is off by default.
    commit_min_probability: float = 0.0
    # A run of copy_min_words words repeating the last copy_lookback_words committed words is
    # taken for a copy of the prompt, not speech (0 disables the guard). Off: it dropped a
    # sentence said again (jfk three times, 1 s apart: most of the second and third lost) and
    # changed no word of the eval sets (longform, read_en, hard, nonspeech, the conversations).
    copy_min_words: int = 0
    copy_lookback_words: int = 32
    # ... except at the start of a window that gave way (its decoder said nothing after its
    # forced prefix, see StreamingConfig.uncarry_after_s): a run of restart_copy_min_words words
    # that it starts with is dropped (0: not). That window hears only what follows the committed
    # words, prompted with them; on the music after "Feels like these days go on forever." it
    # said "A4 said Guttenberg Bible." again. An endpoint that said nothing else leaves its audio
    # to the next window, as doubted words do.
    restart_copy_min_words: int = 3
    condition_on_committed: bool = True
    # After a pause, a prompt whose last word has no punctuation ends with a full stop (only in
    # the prompt): conditioned on a sentence that breaks off, Whisper continues it and skips new
    # words that sound like its end.
    close_prompt_at_pause: bool = True
    # The forced prefix (committed words inside the window) ends without the punctuation mark
    # of its last word, so the decoder decides afresh whether a clause ends there: streamed
    # longform WER 6.4 % instead of 6.5 %, read_en 7.5 % instead of 7.7 % (unaware replay).
    bare_prefix_end: bool = True
    # A window reopened over the words of an utterance that closed at a pause (carry_gap_s)
    # decodes those words again, without a prompt, and its words up to the commit point are
    # dropped by time; once such a window hears nothing new, the utterance takes them as the
    # forced prefix. As the prefix (or after the prompt that breaks off before them) they made
    # the decoder skip new words that sound like their end ("... for you" skipped "ask what
    # you", "And so." skipped "my fellow Americans"). True: always the forced prefix.
    reopened_prefix: bool = False
    # The last committed tokens sent as the prompt (Whisper allows 223). A short one conditions
    # as well and costs less: streamed longform WER 6.5 % with 32, 7.1 % with 48, 7.4 % with 223,
    # 9.2 % with none.
    max_prompt_tokens: int = 32

    def __post_init__(self) -> None:
        _check(0.0 <= self.no_speech_hard_threshold <= 1.0, "policy.no_speech_hard_threshold in [0, 1]")
        _check(0.0 <= self.endpoint_doubt_max_no_speech <= 1.0, "policy.endpoint_doubt_max_no_speech in [0, 1]")
        _check(self.loop_max_ngram >= 1, "policy.loop_max_ngram must be >= 1")
        _check(self.loop_min_repeats >= 2, "policy.loop_min_repeats must be >= 2")
        _check(self.loop_long_ngram == 0 or self.loop_long_ngram >= 2, "policy.loop_long_ngram must be 0 or >= 2")
        _check(self.sampled_min_words >= 0, "policy.sampled_min_words must be >= 0")
        _check(self.copy_min_words >= 0 and self.restart_copy_min_words >= 0, "policy copy run lengths must be >= 0")
        _check(self.dedupe_max_ngram >= 0, "policy.dedupe_max_ngram must be >= 0")
        _check(self.dedupe_window_s >= 0, "policy.dedupe_window_s must be >= 0")
        _check(self.commit_margin_s >= 0 and self.sure_margin_s >= 0, "policy commit margins must be >= 0")
        _check(self.stall_commit_s >= 0, "policy.stall_commit_s must be >= 0")
        _check(self.sure_hypotheses in (1, 2), "policy.sure_hypotheses must be 1 or 2")
        _check(0 <= self.max_prompt_tokens <= 223, "policy.max_prompt_tokens in [0, 223]")
        _check(0.0 <= self.pause_stop_min_probability <= 1.0, "policy.pause_stop_min_probability in [0, 1]")


@dataclass(frozen=True)
class StreamingConfig:
    """The Streamer: model input, request cadence and buffer bounds.

    A request is issued once ``min_step_s`` of new audio arrived in an utterance and none is
    outstanding; the runtime may raise the step under load. The ring buffer holds
    ``max_window_s`` of audio; when more than ``force_commit_s`` stays uncommitted, words older
    than the last ``force_keep_s`` of the latest hypothesis are committed without agreement.
    """

    n_mels: int = 80
    language: str | None = None
    task: str = "transcribe"
    # 0.5 s: finals p50 0.98 s, partials 0.30 s on longform (1 s: 1.52 s and 0.54 s) for a
    # real-time factor of 0.37 with beam 5 (0.22 at 1 s); the runtime lengthens it under load.
    min_step_s: float = 0.5
    # After wordless_after hypotheses in a row without a word (2 s at 0.5 s steps: music or
    # noise the VAD let through, each dropped by the guards), requests come every
    # wordless_step_s instead, until one has words or the utterance ends: music does not keep
    # a core busy (non-speech clips: 350 requests instead of 730; speech unchanged).
    wordless_after: int = 4
    wordless_step_s: float = 2.0
    # Until an utterance is long enough to commit (policy.min_commit_window_s), a hypothesis
    # only refreshes the partial, except the one right before that length, which the first
    # commit agrees with: after the utterance's first request, such partial-only requests wait
    # for early_step_s of new audio (windows of 0.5, 1.5, 2.0 s ... instead of 0.5, 1.0, 1.5,
    # 2.0 s). The commits are the same; read_en: 9 % fewer requests, partial p50 +0.04 s.
    early_step_s: float = 1.0
    # An utterance's first request waits for first_step_s of its audio (with the VAD's
    # pre-roll): 1.5 s makes it the hypothesis the first commit agrees with and drops the guess
    # of a 0.5 s window (windows of 1.5, 2.0, 2.5 s ...): read_en 649 -> 580 requests, the same
    # finals and WER, partials p50 +0.04 s.
    first_step_s: float = 1.5
    # Once the VAD hears a pause of pause_hold_ms inside an utterance, one (urgent) request
    # covers the speech before it, then none until speech resumes. If the endpoint follows,
    # that hypothesis is the endpoint's: the final comes with the endpoint, without another
    # request. 0 disables both (and every pause then has requests at the step).
    pause_hold_ms: int = 150
    # ... unless that hypothesis's last word ends more than pause_unheard_s before the speech: its
    # decoder stopped early, as it may at a window's end (LJ's "the wood cutters", then 2.6 s of
    # speech unsaid), and the endpoint has its own request. In the conversation_tune replay, the
    # pause hypotheses that closed an utterance ended at most 0.80 s before its speech.
    pause_unheard_s: float = 1.0
    # ... and when it ends more than tail_unheard_s before the speech (but within pause_unheard_s),
    # one more request hears only the audio after its last word, prompted with every word before
    # (no forced prefix), and its words end the utterance: conditioned on the committed words,
    # the decoder may end its text a breath before the speech does ("I think it's probably
    # good." then "Alright, thanks." unsaid), and the words alone are heard. 0 disables.
    tail_unheard_s: float = 0.5
    # A client's endpointing shorter than the VAD's endpoint (Deepgram's endpointing=25): when
    # the pause's hypothesis comes back and the speaker is still quiet, its words become final
    # at once (an endpoint final) and the utterance goes on, its window and context intact.
    pause_final: bool = False
    # ... even when its last word's full stop is doubted (policy.pause_stop_min_probability): the
    # stop is dropped (Flux's eager ends of turn). Else that pause's final waits for the endpoint,
    # which keeps the stop, or speech resumes and the next windows decide (a breath).
    eager_pause_finals: bool = False
    # Committed words stay in the window (as a forced decoder prefix) until it is this long;
    # then it is trimmed at the commit point. 0 trims at every commit.
    trim_after_s: float = 8.0
    # ... and keeps the committed words of its last trim_keep_s seconds as that prefix: a window
    # of only the uncommitted second or two gives the model too little to hear (0 trims at the
    # commit point).
    trim_keep_s: float = 3.0
    # An utterance that starts within carry_gap_s of the last committed word reopens the audio
    # of the committed words of its last carry_keep_s seconds (the pause between included):
    # they are its forced prefix, so a short utterance after a pause is decoded in its context,
    # as offline Whisper hears it, not alone ("Montreal?" ... "forced aligner" decoded alone
    # is doubted and dropped). 0 disables.
    carry_gap_s: float = 3.0
    carry_keep_s: float = 3.0
    # ... but once such a window, decoded after those words (its forced prefix), hears nothing
    # new while the utterance has uncarry_after_s of its own audio in it, its windows start at
    # its own audio: the decoder took the carried words for the whole window (a counted "1, 2,
    # 3." then another speaker's sentence, all skipped until the endpoint). So does a window
    # inside an utterance whose decoder says nothing at all after the committed words it holds,
    # with uncarry_after_s of audio after them: its windows start at the commit point (8 s of
    # radio unheard after "See you later. bye bye"). 0 disables.
    uncarry_after_s: float = 1.0
    max_window_s: float = 30.0
    force_commit_s: float = 20.0
    force_keep_s: float = 5.0
    vad: VadConfig = field(default_factory=VadConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)

    def __post_init__(self) -> None:
        _check(self.n_mels in (80, 128), "n_mels must be 80 or 128")
        _check(self.task in ("transcribe", "translate"), "task must be transcribe or translate")
        _check(0.1 <= self.min_step_s <= 10.0, "min_step_s must be in [0.1, 10]")
        _check(self.wordless_after >= 1, "wordless_after must be >= 1")
        _check(
            self.min_step_s <= self.wordless_step_s <= self.max_window_s - self.force_commit_s,
            "wordless_step_s must be in [min_step_s, max_window_s - force_commit_s]",
        )
        _check(0.0 < self.early_step_s <= 10.0, "early_step_s must be in (0, 10]")
        _check(0.0 < self.first_step_s <= 10.0, "first_step_s must be in (0, 10]")
        _check(0 <= self.pause_hold_ms <= 10_000, "pause_hold_ms must be in [0, 10000]")
        _check(self.pause_unheard_s >= 0, "pause_unheard_s must be >= 0")
        _check(self.tail_unheard_s >= 0, "tail_unheard_s must be >= 0")
        _check(1.0 <= self.max_window_s <= 30.0, "max_window_s must be in [1, 30]")
        _check(0.0 <= self.trim_after_s <= self.max_window_s, "trim_after_s must be in [0, max_window_s]")
        _check(0.0 <= self.trim_keep_s <= 10.0, "trim_keep_s must be in [0, 10]")
        _check(0.0 <= self.carry_gap_s <= 10.0, "carry_gap_s must be in [0, 10]")
        _check(0.0 <= self.carry_keep_s <= 10.0, "carry_keep_s must be in [0, 10]")
        _check(0.0 <= self.uncarry_after_s <= 10.0, "uncarry_after_s must be in [0, 10]")
        _check(
            0 < self.force_keep_s < self.force_commit_s < self.max_window_s,
            "need 0 < force_keep_s < force_commit_s < max_window_s",
        )
        _check(
            self.min_step_s <= self.max_window_s - self.force_commit_s,
            "min_step_s must leave room in the window: <= max_window_s - force_commit_s",
        )
