"""The audio Whisper takes: 16 kHz mono samples, 10 ms log-mel frames, 30 s windows.

Shared by the signal code (``audio/``, which computes the log-mel) and the model (``model/``,
which pads, encodes and times windows of it); the two import nothing from each other.
"""

from __future__ import annotations

SAMPLE_RATE = 16_000
N_FFT = 400  # samples in one STFT frame (25 ms)
HOP_LENGTH = 160  # samples between frames (10 ms)
CHUNK_LENGTH = 30  # seconds in one Whisper window
N_SAMPLES = CHUNK_LENGTH * SAMPLE_RATE  # 480,000 samples in a window
N_FRAMES = N_SAMPLES // HOP_LENGTH  # 3,000 mel frames in a window
FRAMES_PER_SECOND = SAMPLE_RATE // HOP_LENGTH  # 100 frames per second (10 ms each)
N_SAMPLES_PER_TOKEN = HOP_LENGTH * 2  # the conv stem halves the frames: 20 ms per audio token
TIME_PRECISION = N_SAMPLES_PER_TOKEN / SAMPLE_RATE  # 0.02 s per timestamp token
