"""The conversational evaluation set: seeded meeting-like streams composed from the evaluation set.

Read speech is where streaming matches offline; conversations are where it does not. Each stream
here strings utterances of the ``read_en`` and ``hard`` categories together as a meeting sounds:

* turns of one to three utterances by one speaker, the next turn by another speaker;
* pauses of 0.2-1.5 s inside a turn and 0.4-8 s between turns (a few long ones);
* music, kitchen noise, a bird or laughter between some turns (2-6 s cut from ``nonspeech``);
* a few utterances under noise at 10 dB SNR;
* one long silence (15-25 s of room tone) in every other stream.

The speech clips are split once, seeded, into two halves that share no clip:
``conversation_tune`` streams are made from one and ``conversation_test`` streams from the
other. Tune settings on the first; report the second (README says which figure is which).

    .venv/bin/python benchmarks/conversation.py            # writes the streams and their manifest
    .venv/bin/python benchmarks/streaming.py --category conversation_test

The streams are written once into ``benchmarks/.cache/conversation-<seed>/`` (git-ignored) with a
``manifest.tsv`` in the evaluation set's format; ``benchmarks/streaming.py`` makes them on demand.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import shared_data_dir  # noqa: E402
from benchmarks.scoring import Clip, read_manifest  # noqa: E402

SR = 16_000
SEED = 20261124
CATEGORIES = ("conversation_tune", "conversation_test")
STREAMS_PER_SET = 5
CACHE = ROOT / "benchmarks" / ".cache"
# background sounds between turns, by kind
GAPS = {
    "music": ("ns_music_vibe_ace", "ns_music_sugar_plum_fairy", "ns_music_brahms_hungarian_dance5"),
    "noise": ("ns_noise_doing_the_dishes", "ns_noise_exercise_bike"),
    "animal": ("ns_animal_robin",),
    "laughter": ("ns_vocal_laughter",),
}
ROOM_TONE = "ns_near_silence_nst_sv_u0016001"
SNR_NOISE = ("ns_noise_doing_the_dishes", "ns_gen_pink_noise_-20dBFS_30s", "ns_noise_exercise_bike")


def speaker(clip_id: str) -> str:
    """Who speaks in a clip, as far as the manifest tells: clips of one reader share a name."""
    rules = [
        (r"^(hard_(voice|spont)_mfa|hard_voice_(falsetto|whisper))", "mfa_author"),
        (r"^en_lj_", "lj"),
        (r"^en_ps_librivox_sense", "librivox_sense"),
        (r"^en_ps_cards", "ps_cards"),
        (r"^en_ls_\w+_(\d+)-", None),
        (r"^(en|hard)_arctic_(\w+?)_a\d+|^hard_accent_arctic_(\w+?)_a\d+", None),
    ]
    for pattern, name in rules:
        found = re.match(pattern, clip_id)
        if found:
            return name or "_".join(g for g in found.groups() if g)
    return clip_id


@dataclass
class Stream:
    id: str
    audio: np.ndarray
    reference: str
    notes: str


def _level(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) + 1e-9


def _excerpt(audio: np.ndarray, seconds: float, rng: random.Random) -> np.ndarray:
    n = min(len(audio), int(seconds * SR))
    start = rng.randrange(0, len(audio) - n + 1)
    out = audio[start : start + n].copy()
    ramp = min(n // 4, SR // 20)  # 50 ms fades: no click at the cut
    if ramp:
        out[:ramp] *= np.linspace(0, 1, ramp, dtype=np.float32)
        out[-ramp:] *= np.linspace(1, 0, ramp, dtype=np.float32)
    return out


def _under_noise(speech: np.ndarray, noise: np.ndarray, snr_db: float, rng: random.Random) -> np.ndarray:
    bed = np.resize(_excerpt(noise, len(speech) / SR + 1, rng), len(speech))
    bed = bed * (_level(speech) / _level(bed) / 10 ** (snr_db / 20))
    return np.clip(speech + bed, -1, 1).astype(np.float32)


def compose(  # type: ignore[no-untyped-def]
    clips: list[Clip], sounds: dict[str, np.ndarray], load, rng: random.Random, name: str, long_silence: bool
) -> Stream:
    """One meeting-like stream from ``clips`` (in turns by speaker), with pauses and sounds."""
    by_speaker: dict[str, list[Clip]] = {}
    for clip in clips:
        by_speaker.setdefault(speaker(clip.id), []).append(clip)
    parts: list[np.ndarray] = [np.zeros(int(rng.uniform(0.5, 2.0) * SR), np.float32)]
    references: list[str] = []
    notes: list[str] = []
    last = None
    silence_at = rng.randrange(1, max(2, len(clips) // 2)) if long_silence else -1
    turn = 0
    while any(by_speaker.values()):
        waiting = [s for s, left in by_speaker.items() if left]
        choices = [s for s in waiting if s != last] or waiting
        who = rng.choice(sorted(choices))
        last = who
        for k in range(min(len(by_speaker[who]), rng.choice((1, 1, 2, 3)))):
            clip = by_speaker[who].pop(0)
            audio = load(clip)
            if rng.random() < 0.12 and not re.search("noisy|narrowband", clip.id):  # not noise on noise
                noise = rng.choice(SNR_NOISE)
                audio = _under_noise(audio, sounds[noise], 10.0, rng)
                notes.append(f"{clip.id}@10dB({noise})")
            else:
                notes.append(clip.id)
            if k:  # a pause inside the turn
                parts.append(np.zeros(int(rng.uniform(0.2, 1.5) * SR), np.float32))
            parts.append(audio)
            references.append(clip.reference)
        turn += 1
        gap = rng.uniform(0.4, 3.0) if rng.random() < 0.85 else rng.uniform(3.0, 8.0)
        if turn == silence_at:
            gap = rng.uniform(15.0, 25.0)
            parts.append(np.resize(sounds[ROOM_TONE], int(gap * SR)).astype(np.float32))
            notes.append(f"silence {gap:.1f}s")
            continue
        if rng.random() < 0.3:
            kind = rng.choice(sorted(GAPS))
            sound = rng.choice(GAPS[kind])
            seconds = rng.uniform(2.0, 6.0)
            parts += [np.zeros(int(0.3 * SR), np.float32), _excerpt(sounds[sound], seconds, rng) * 0.5]
            notes.append(f"{kind}:{sound}")
            gap = rng.uniform(0.3, 1.5)
        parts.append(np.zeros(int(gap * SR), np.float32))
    return Stream(name, np.concatenate(parts), " ".join(references), " ".join(notes))


def _write_wav(path: Path, audio: np.ndarray) -> None:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(SR)
        out.writeframes((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())


def build(manifest: Path, seed: int = SEED, out: Path | None = None) -> Path:
    """Write the streams of both sets and their manifest (once); returns the manifest's path."""
    from streamwhisper.audio.files import load_audio

    out = out or CACHE / f"conversation-{seed}"
    target = out / "manifest.tsv"
    if target.is_file():
        return target
    out.mkdir(parents=True, exist_ok=True)
    speech = read_manifest(manifest, ["read_en", "hard"])
    nonspeech = {c.id: c for c in read_manifest(manifest, ["nonspeech"])}
    wanted = {ROOM_TONE, *SNR_NOISE, *(s for group in GAPS.values() for s in group)}
    sounds = {name: load_audio(nonspeech[name].wav) for name in sorted(wanted)}
    rng = random.Random(seed)
    order = sorted(speech, key=lambda c: c.id)
    rng.shuffle(order)
    halves = {CATEGORIES[0]: order[0::2], CATEGORIES[1]: order[1::2]}
    rows = ["id\twav\tseconds\treference\tsource\tlicense\tspeaker_notes\tcategory\tlang"]
    for category, clips in halves.items():
        for i in range(STREAMS_PER_SET):
            part = clips[i::STREAMS_PER_SET]
            stream = compose(part, sounds, lambda c: load_audio(c.wav), rng, f"{category}_{i}", long_silence=i % 2 == 0)
            _write_wav(out / f"{stream.id}.wav", stream.audio)
            licenses = "; ".join(sorted({c.license for c in part}))
            rows.append(
                f"{stream.id}\t{stream.id}.wav\t{len(stream.audio) / SR:.3f}\t{stream.reference}\t"
                f"composed by benchmarks/conversation.py (seed {seed})\t{licenses}\t{stream.notes}\t{category}\ten"
            )
    target.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, default=None, help="the evaluation set's manifest.tsv")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    path = build(args.manifest or shared_data_dir() / "eval" / "manifest.tsv", args.seed)
    for clip in read_manifest(path):
        print(f"{clip.category}\t{clip.id}\t{clip.seconds:.1f} s\t{len(clip.reference.split())} words")
    return 0


if __name__ == "__main__":
    sys.exit(main())
