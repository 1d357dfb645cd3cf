"""An audio file (WAV, FLAC, MP3, anything ffmpeg reads) → mono float32 samples at 16 kHz, by the
ffmpeg binary imageio-ffmpeg ships (a dependency already: it writes our mp4s). What the official
code gets from `librosa.load(path, sr=16000)`: the channels averaged, resampled, 16-bit PCM read as
x / 32768. For a 16 kHz mono file both are the file's samples exactly; at another rate the two
resamplers differ slightly (ffmpeg's swresample vs soxr) — README says so.

`probe` is the cheap check a run makes before anything loads: the file decodes, is long enough
and is not silence."""

from __future__ import annotations

import os
import subprocess

import numpy as np

RATE = 16000  # wav2vec2's sampling rate
SILENCE_RMS = 1e-4  # below this the audio is silence (−80 dBFS): nothing for the mouth to follow


class AudioError(ValueError):
    """The audio cannot be used; the message names the file and what is wrong."""


def read_audio(path: str) -> np.ndarray:
    """The file's samples, mono, 16 kHz, float32 in [-1, 1]."""
    import imageio_ffmpeg

    if not os.path.isfile(path):
        raise AudioError(f"{path} does not exist")
    cmd = [
        imageio_ffmpeg.get_ffmpeg_exe(),
        "-nostdin",
        "-v",
        "error",
        "-i",
        path,
        "-vn",
        "-ac",
        "1",
        "-ar",
        str(RATE),
        "-f",
        "f32le",
        "-",
    ]
    done = subprocess.run(cmd, capture_output=True, check=False)
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines()
        raise AudioError(f"{path} is not an audio file ffmpeg can read ({why[-1] if why else 'no audio stream'})")
    samples = np.frombuffer(done.stdout, np.float32).copy()
    if samples.size == 0:
        raise AudioError(f"{path} has no audio samples")
    return samples


def probe(path: str, min_seconds: float) -> dict:
    """The file decoded and checked: at least `min_seconds` long, not silence. Returns a record
    for the sidecar (path, seconds, rms)."""
    samples = read_audio(path)
    seconds = samples.size / RATE
    if seconds < min_seconds:
        raise AudioError(
            f"{path} is {seconds:.2f} s long; it needs at least {min_seconds:.2f} s (one clip's first frames)"
        )
    rms = float(np.sqrt(np.mean(np.square(samples, dtype=np.float64))))
    if rms < SILENCE_RMS:
        raise AudioError(
            f"{path} is silent (RMS {rms:.1e}); S2V moves the mouth with the speech, give a file with speech"
        )
    return {"path": os.path.abspath(path), "seconds": round(seconds, 3), "rms": round(rms, 6)}
