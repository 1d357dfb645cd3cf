"""Example inputs for the built-in tiny S2V model: a portrait (a face, as the Animate examples
draw it) and a speech-like sound — syllables of a voiced tone with formant-like harmonics, their
loudness rising and falling four times a second, with short pauses. Made with numpy from fixed
numbers, so they are the same on every machine; written as a PNG and a 16 kHz mono 16-bit WAV.
Used when `model=tiny_s2v` is run with no inputs, and by the tests."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from .animate_examples import face_frame

RATE = 16000
SECONDS = 1.3  # three clips of the tiny preset's 8 frames at 16 fps (0.5 s each)


def speech(seconds: float = SECONDS, rate: int = RATE) -> np.ndarray:
    """int16 samples of a speech-like sound."""
    t = np.arange(int(seconds * rate)) / rate
    pitch = 140 + 25 * np.sin(2 * np.pi * 1.3 * t)  # a voice's pitch, drifting
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    voiced = sum(a * np.sin(k * phase) for k, a in ((1, 1.0), (2, 0.6), (3, 0.45), (5, 0.3), (8, 0.15)))
    syllables = np.clip(np.sin(2 * np.pi * 4.0 * t), 0.0, None) ** 0.7  # four a second, silent between
    signal = 0.25 * voiced * syllables
    return np.round(np.clip(signal, -1.0, 1.0) * 32767).astype(np.int16)


def write_wav(path, samples: np.ndarray, rate: int = RATE) -> None:
    """16-bit mono WAV of `samples` at `path` (a path or a binary file object)."""
    with wave.open(path if hasattr(path, "write") else str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(np.ascontiguousarray(samples, "<i2").tobytes())


def write_examples(folder, size: int) -> dict[str, str]:
    """The portrait (size × size) and the speech in `folder`; {setting: path}."""
    from PIL import Image

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"image": folder / "portrait.png", "audio": folder / "speech.wav"}
    Image.fromarray(face_frame(0, size)).save(paths["image"])
    write_wav(paths["audio"], speech())
    return {k: str(v) for k, v in paths.items()}


def stored_examples(size: int) -> dict[str, str]:
    """The example inputs, written once per machine under the cache home (builtin/stored.py)."""
    import hashlib

    from parallel_wan.builtin.stored import stored_inputs

    key = hashlib.sha256(Path(__file__).read_bytes() + f"{size}".encode()).hexdigest()[:16]
    folder = stored_inputs("s2v_examples", key, lambda f: write_examples(f, size))
    return {"image": str(folder / "portrait.png"), "audio": str(folder / "speech.wav")}
