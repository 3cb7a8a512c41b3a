"""The streamwhisper error tree.

::

    StreamWhisperError
     +-- ConfigError          bad settings (file, environment, flags or a client's config message)
     +-- ModelLoadError       a model that cannot be found, downloaded, verified or parsed
     +-- AudioFormatError     audio that cannot be decoded or has the wrong sample format
     |    +-- AudioTooLongError   more audio than a limit allows (an upload)
     +-- ProtocolError        a message that breaks the wire protocol (carries a close code)
     +-- AudioDeviceError     no usable microphone (no input device, no PortAudio, unknown device)

A session's failure ends that session with an ``Error`` event and a close code, never the server.
"""

from __future__ import annotations


class StreamWhisperError(Exception):
    """Base class of every error streamwhisper raises on purpose."""


class ConfigError(StreamWhisperError):
    """Invalid configuration."""


class ModelLoadError(StreamWhisperError):
    """A model could not be found, downloaded, verified or loaded; the message names the file."""


class AudioFormatError(StreamWhisperError):
    """Audio that cannot be decoded, or samples in a format we do not accept."""


class AudioTooLongError(AudioFormatError):
    """Audio longer than the limit its decoder was given."""


class ProtocolError(StreamWhisperError):
    """A message broke the wire protocol; ``code`` is the WebSocket close code a server answers
    a client's with, ``kind`` the error code it reports."""

    def __init__(self, message: str, code: int = 1007, kind: str = "invalid_message") -> None:
        super().__init__(message)
        self.code = code
        self.kind = kind


class AudioDeviceError(StreamWhisperError):
    """No usable audio input: no device, PortAudio missing, or a device name that matches none."""
