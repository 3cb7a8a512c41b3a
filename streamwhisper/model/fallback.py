"""Whisper's temperature fallback: the one rule for "decode this window again, at a higher temperature?".

Offline transcription (:mod:`streamwhisper.transcribe`) and the streaming recogniser
(:mod:`streamwhisper.model.serving`) both decode a window at each temperature of a
:class:`FallbackRule` in turn, until the result is neither a loop (text that zlib compresses
better than ``compression_ratio_threshold``) nor garbage (an average log-probability below
``logprob_threshold``), unless the model calls the window silent (``no_speech_prob`` above
``no_speech_threshold`` and the average log-probability low). Their defaults differ only in
the temperatures.

Imports no torch: the settings are loaded with the rest of the configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ..errors import ConfigError

# Whisper's values, the defaults of every rule (the streaming policy's guards start from them too).
WHISPER_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
COMPRESSION_RATIO_THRESHOLD = 2.4
LOGPROB_THRESHOLD = -1.0
NO_SPEECH_THRESHOLD = 0.6


class Decoded(Protocol):
    """What the rule looks at in a decoding result."""

    @property
    def compression_ratio(self) -> float: ...

    @property
    def avg_logprob(self) -> float: ...

    @property
    def no_speech_prob(self) -> float: ...


D = TypeVar("D", bound=Decoded)


@dataclass(frozen=True)
class FallbackRule:
    """The temperatures a window is decoded at, and Whisper's thresholds for trying the next one.

    A threshold set to None is not checked.
    """

    temperatures: tuple[float, ...] = WHISPER_TEMPERATURES
    compression_ratio_threshold: float | None = COMPRESSION_RATIO_THRESHOLD
    logprob_threshold: float | None = LOGPROB_THRESHOLD
    no_speech_threshold: float | None = NO_SPEECH_THRESHOLD

    def __post_init__(self) -> None:
        if not self.temperatures or any(t < 0 for t in self.temperatures):
            raise ConfigError("temperatures must be one or more values >= 0")
        if list(self.temperatures) != sorted(self.temperatures):
            raise ConfigError("temperatures must be in increasing order")
        if self.compression_ratio_threshold is not None and self.compression_ratio_threshold <= 0:
            raise ConfigError("compression_ratio_threshold must be > 0")
        if self.no_speech_threshold is not None and not 0.0 <= self.no_speech_threshold <= 1.0:
            raise ConfigError("no_speech_threshold must be in [0, 1]")

    def is_loop(self, result: Decoded) -> bool:
        """True when the text compresses too well to be speech (a decoding loop)."""
        return (
            self.compression_ratio_threshold is not None and result.compression_ratio > self.compression_ratio_threshold
        )

    def needs_fallback(self, result: Decoded) -> bool:
        """True when a window's decoding looks like a loop or garbage, and not like silence.

        As in openai-whisper and faster-whisper, silence (no-speech above its threshold with
        unsure text) wins over a loop too: that window is skipped, not decoded again at a higher
        temperature, which costs a decoding and may give text sure enough to be kept.
        """
        low_logprob = self.logprob_threshold is not None and result.avg_logprob < self.logprob_threshold
        silent = self.no_speech_threshold is not None and result.no_speech_prob > self.no_speech_threshold
        return (self.is_loop(result) or low_logprob) and not (silent and low_logprob)

    def is_silence(self, result: Decoded) -> bool:
        """Whisper's skip rule: a confident no-speech unless the text is itself confident."""
        if self.no_speech_threshold is None or result.no_speech_prob <= self.no_speech_threshold:
            return False
        return not (self.logprob_threshold is not None and result.avg_logprob > self.logprob_threshold)

    def decode(self, decode_at: Callable[[float], D], first: D | None = None) -> D:
        """Decode at each temperature in turn (``decode_at(temperature)``) until a result needs
        no fallback; the last result when every one does.

        ``first``: the result at the first temperature, when the caller already has it.
        """
        result = first if first is not None else decode_at(self.temperatures[0])
        for temperature in self.temperatures[1:]:
            if not self.needs_fallback(result):
                break
            result = decode_at(temperature)
        return result
