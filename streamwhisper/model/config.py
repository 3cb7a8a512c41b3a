"""The model's settings: which model to load (:class:`ModelConfig`) and how it serves streaming
requests (:class:`RecognizerConfig`). Frozen, validated at construction, and free of torch, so
loading the configuration loads no model code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ConfigError
from .fallback import FallbackRule


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


@dataclass(frozen=True)
class ModelConfig:
    """Which model to run, and how."""

    name: str = "tiny.en"  # a known name (streamwhisper models), a CTranslate2 dir or a .pt file
    device: str = "cpu"  # cpu, cuda, cuda:N
    compute_type: str = "default"  # default, float32, mixed, int8_encoder, int8_logits, int8, float16, bfloat16
    threads: int = 0  # torch intra-op threads; 0 = one per core
    download_root: str = ""  # where official checkpoints are cached; "" = ~/.cache/streamwhisper
    download_url: str = ""  # where official checkpoints are downloaded from; "" = OpenAI's server

    def __post_init__(self) -> None:
        _check(self.threads >= 0, "model.threads must be >= 0")


@dataclass(frozen=True)
class RecognizerConfig:
    """How the model serves streaming requests (:class:`~streamwhisper.model.serving.WhisperRecognizer`).

    ``audio_ctx`` "full" pads every window to 30 s as the reference does: the most accurate
    (tiny.en streamed over read_en: WER 7.1 %, as offline, against 13.4 % with "fit"). "fit"
    encodes only the filled part of a window (rounded up to ``ctx_step_s`` and at least
    ``min_ctx_s``), as whisper.cpp's audio_ctx does: a 5 s window costs a fifth of a 30 s one.
    "auto" (the default): batches of at most ``full_ctx_max_batch`` windows (one stream, an idle
    daemon; a request marked ``crowded`` counts as a batch of two at least) are fitted to at
    least ``alone_min_ctx_s`` (30: "full"), larger ones to ``min_ctx_s`` (longform WER: 6.7 %
    offline; streamed 7.0 % full, 7.7 % fit at 10 s, 9.5 % at 6 s). A window with timestamp
    tokens (a file's), or alone with its language to detect (a multilingual model), is encoded
    at 30 s, as the reference does.
    """

    # Beam search for batches of at most beam_max_batch windows (one stream, an idle daemon):
    # with the prompt decoded once and the beams sharing the window's keys, beam 5 costs 10 ms
    # more than greedy per 0.5 s step (136 against 128 ms) and streamed longform WER is 6.4 %
    # against 6.7 % greedy. Larger batches decode greedily, all windows at once. 0: greedy.
    beam_size: int = 5
    beam_max_batch: int = 1
    audio_ctx: str = "auto"
    full_ctx_max_batch: int = 1
    # Windows per encoder call: the encoder is compute-bound, so larger calls gain little on a
    # CPU while their activations (and the process's peak memory) grow with every window.
    encode_batch: int = 2
    ctx_step_s: float = 2.0
    min_ctx_s: float = 10.0
    # A window served alone ("auto", a batch of at most full_ctx_max_batch) is fitted to at least
    # this: at 20 s a request costs about 30 % less than at 30 s, and the streamed words of
    # read_en, longform and the conversations are those of 30 s within noise (docs/tuning-log.md,
    # twenty-second session). 30: the full context.
    alone_min_ctx_s: float = 20.0
    # A window that ends a turn (``endpoint``) is fitted to at least this (and min_ctx_s) in a
    # batch too. Under load a turn's last window loops at 10 s four times as often as a
    # partial's; 20 s cut those loops by 60 % but cost every turn's end more than that saved on
    # the AVX2 EPYC (eight streams' `finalize` p50 / p95 1.49 / 2.96 s against 1.15 / 2.82 s,
    # when such loops were decoded again at 20 s; docs/tuning-log.md, thirty-ninth session).
    endpoint_min_ctx_s: float = 10.0
    # A window served as in a batch (fitted to 10 s, greedy) that loops is not decoded again at
    # 20 s: its loop is cut after the first occurrence (``PolicyConfig.loop_max_ngram``). The
    # retry cost a turn's final a second encoding on one core; without it, eight streams'
    # `finalize` p95 1.00-1.05 s against 1.66-3.17 s (AVX2 EPYC), 0.62-1.31 s (median of seven
    # 0.66) against 0.98-1.82 s (AVX-512 BF16 EPYC), and replays served as in a batch 8 edits
    # more over six runs (docs/tuning-log.md, forty-third and forty-fourth sessions). True:
    # decoded again (``serving.LOOP_RETRY_S``), as a window alone always is.
    retry_batch_loops: bool = False
    max_new_tokens: int = 128
    # Speech runs at 2-4 tokens per second; a window decoding far more is looping. Capping the
    # tokens at this rate (plus a few) bounds the cost of a loop before the guards drop it.
    max_tokens_per_s: float = 6.0
    pad: str = "silence"  # pad short windows with the mel of silence ("silence") or with 0 ("zero")
    # the first (greedy) pass over several windows: one decoder step for all rows (True) or one
    # window at a time (False, the reference path: decode() per window)
    batch_decode: bool = True
    # Whisper's temperature fallback with two temperatures: a window sampled at 0.4 when greedy
    # decoding loops or doubts; more temperatures cost a decoding pass each on music and noise.
    fallback: FallbackRule = field(default_factory=lambda: FallbackRule(temperatures=(0.0, 0.4)))

    def __post_init__(self) -> None:
        _check(self.beam_size >= 0, "recognizer.beam_size must be >= 0 (0: greedy)")
        _check(self.beam_max_batch >= 0, "recognizer.beam_max_batch must be >= 0")
        _check(self.audio_ctx in ("auto", "fit", "full"), "recognizer.audio_ctx must be auto, fit or full")
        _check(self.full_ctx_max_batch >= 0, "recognizer.full_ctx_max_batch must be >= 0")
        _check(self.encode_batch >= 1, "recognizer.encode_batch must be >= 1")
        _check(self.ctx_step_s > 0, "recognizer.ctx_step_s must be > 0")
        _check(0 <= self.min_ctx_s <= 30, "recognizer.min_ctx_s must be in [0, 30]")
        _check(0 <= self.alone_min_ctx_s <= 30, "recognizer.alone_min_ctx_s must be in [0, 30]")
        _check(0 <= self.endpoint_min_ctx_s <= 30, "recognizer.endpoint_min_ctx_s must be in [0, 30]")
        _check(1 <= self.max_new_tokens <= 224, "recognizer.max_new_tokens must be in [1, 224]")
        _check(self.max_tokens_per_s > 0, "recognizer.max_tokens_per_s must be > 0")
        _check(self.pad in ("silence", "zero"), "recognizer.pad must be silence or zero")
