"""Copy the clips and reference values the tests use from an evaluation data folder into tests/data.

The tests need nothing outside the repository; this is how their data was made, and how to
remake it (or add a clip) from the evaluation set the benchmarks read:

    python tools/copy_test_data.py --shared ../shared/data

Each clip is copied losslessly as 16-bit FLAC (an excerpt where ``EXCERPTS`` says so), with a
manifest in the evaluation set's format (tab-separated, no quoting) whose ``wav`` column points
at the FLAC file; the reference-implementation values are copied as they are.
"""

from __future__ import annotations

import argparse
import shutil
import wave
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "tests" / "data"

CLIPS = [
    # read_en: the equivalence clip, short commands, and sentences the server and batch tests stream
    "en_jfk",
    "en_ps_goforward",
    "en_arctic_aew_a0001",
    "en_arctic_a0010",
    "en_lj_LJ001-0003",
    "en_lj_LJ001-0014",
    "en_lj_LJ001-0016",
    "en_lj_LJ001-0028",
    "en_ls_dev_1272-128104-0000",
    "en_ls_dev_1272-141231-0002",
    "en_ls_dev_2412-153948-0000",
    "en_picovoice_cheetah_test_en",
    "en_ps_librivox_sense_0890",
    "en_ps_librivox_sense_0920",
    # hard: whispered speech, 30 dB below full scale (the VAD's input levelling)
    "hard_voice_whisper2",
    # multilingual: language detection (reference values exist for these) and translation
    "ml_de_picovoice",
    "ml_es_picovoice",
    "ml_it_picovoice",
    "ml_ja_picovoice",
    # nonspeech: music, an animal, a sound effect, room noise (silence and noise are generated in tests)
    "ns_music_trumpet_loop",
    "ns_music_vibe_ace",
    "ns_animal_robin",
    "ns_sfx_big_buck_bunny",
    "ns_noise_picovoice_empty",
]
EXCERPTS = {"ns_music_vibe_ace": 20.0}  # seconds from the start: the whole track is 61 s
REFERENCE_FILES = ["whisper_reference.json", "jfk_mel80.npy"]


def read_pcm16(path: Path) -> np.ndarray:
    with wave.open(str(path), "rb") as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 16_000), path
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")


def write_flac(path: Path, pcm: np.ndarray) -> None:
    with av.open(str(path), "w") as out:
        stream = out.add_stream("flac", rate=16_000, layout="mono")
        stream.format = "s16"
        for i in range(0, pcm.shape[0], 4096):
            block = np.ascontiguousarray(pcm[None, i : i + 4096])
            frame = av.AudioFrame.from_ndarray(block, format="s16", layout="mono")
            frame.sample_rate, frame.pts, frame.time_base = 16_000, i, Fraction(1, 16_000)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, required=True, help="the evaluation data folder (eval/, reference/)")
    args = parser.parse_args()
    lines = (args.shared / "eval" / "manifest.tsv").read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    rows = {row["id"]: row for row in (dict(zip(header, line.split("\t"), strict=True)) for line in lines[1:] if line)}
    (TARGET / "audio").mkdir(parents=True, exist_ok=True)
    out = ["\t".join(header)]
    for clip_id in CLIPS:
        row = dict(rows[clip_id])
        pcm = read_pcm16(args.shared / "eval" / row["wav"])
        if clip_id in EXCERPTS:
            pcm = pcm[: int(EXCERPTS[clip_id] * 16_000)]
            row["source"] += f" (excerpt: the first {EXCERPTS[clip_id]:g} s)"
        row["wav"] = f"audio/{clip_id}.flac"
        row["seconds"] = f"{pcm.shape[0] / 16_000:.3f}"
        write_flac(TARGET / row["wav"], pcm)
        out.append("\t".join(row[h] for h in header))
    (TARGET / "manifest.tsv").write_text("\n".join(out) + "\n", encoding="utf-8")
    (TARGET / "reference").mkdir(exist_ok=True)
    for name in REFERENCE_FILES:
        shutil.copyfile(args.shared / "reference" / name, TARGET / "reference" / name)
    print(f"{len(CLIPS)} clips and {len(REFERENCE_FILES)} reference files in {TARGET}")


if __name__ == "__main__":
    main()
