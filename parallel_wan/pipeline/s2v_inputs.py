"""S2V's inputs on the host: the portrait as the official code prepares it, and the speech's
wav2vec2 features per video frame, made on the text-encoding process and broadcast."""

from __future__ import annotations

import logging
import os

import numpy as np

from ..report.outputs import file_sha256

log = logging.getLogger("parallel_wan")


def _fitted(image, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """A PIL image as torchvision's `Resize(min(H, W))` then `CenterCrop((H, W))` leave it:
    ((H, W, 3) float32 0–255, (H, W) bool: the pixels CenterCrop padded) — the short side scaled
    (bilinear, the long side truncated), the centre cut out, zero-padded where too small."""
    from PIL import Image

    w, h = image.size
    side = min(height, width)
    new = (side, int(side * h / w)) if w <= h else (int(side * w / h), side)
    if new != (w, h):
        image = image.resize(new, resample=Image.BILINEAR)
    padded = _centre(np.ones((new[1], new[0], 1), np.float32), height, width)[..., 0] == 0
    return _centre(np.asarray(image, np.float32), height, width), padded


def portrait(path: str, height: int, width: int) -> tuple[np.ndarray, dict]:
    """The portrait → ((1, 3, 1, H, W) float32 in [-1, 1], a record), as the official code's
    torchvision `Resize(min(H, W))` then `CenterCrop((H, W))` on the PIL image: the short side
    scaled to min(H, W) (bilinear, the long side truncated), the centre cut out — and where the
    image is then narrower than the video, black bars (torchvision pads before cropping)."""
    from PIL import Image

    digest = file_sha256(path)
    with Image.open(path) as im:
        im = im.convert("RGB")
        size = im.size
        pixels, padded = _fitted(im, height, width)
    w, h = size
    if padded.any():
        log.warning(
            "image=%s (%dx%d) is narrower than the video's %dx%d after scaling its short side; black bars fill "
            "the rest, as the official code does — crop it to the video's aspect first",
            path,
            w,
            h,
            width,
            height,
        )
    image = (pixels / 255.0 * 2.0 - 1.0).transpose(2, 0, 1)[None, :, None]
    record = {"path": os.path.abspath(path), "sha256": digest, "size": list(size), "resized_to": [width, height]}
    return np.ascontiguousarray(image, np.float32), record


def _centre(pixels: np.ndarray, height: int, width: int) -> np.ndarray:
    """torchvision's CenterCrop: zero-padded (left/top the smaller half) where too small, then the
    window at round((size − crop) / 2)."""
    h, w = pixels.shape[:2]
    pad_h, pad_w = max(0, height - h), max(0, width - w)
    if pad_h or pad_w:
        pixels = np.pad(pixels, ((pad_h // 2, (pad_h + 1) // 2), (pad_w // 2, (pad_w + 1) // 2), (0, 0)))
        h, w = pixels.shape[:2]
    top, left = int(round((h - height) / 2.0)), int(round((w - width) / 2.0))
    return pixels[top : top + height, left : left + width]


def audio_features(loaded, path: str, clip_frames: int, fps: int, backend) -> tuple[np.ndarray, int, dict]:
    """((25, width, clips · clip_frames) host float32 features, clips, a record) of the speech at
    `path`: decoded, through wav2vec2 on the text-encoding process (then released unless a job
    keeps it), sampled per video frame (audio/features.py), broadcast to every process."""
    from ..audio.decode import RATE, read_audio
    from ..audio.features import clip_features

    features, record = None, None
    if backend.encodes_text:
        samples = read_audio(path)
        record = {"path": os.path.abspath(path), "sha256": file_sha256(path), "seconds": round(samples.size / RATE, 3)}
        features, clips = clip_features(loaded.audio_encoder.features(samples), clip_frames, fps)
        if loaded.texts is None:
            loaded.audio_encoder.release()
    shared = backend.broadcast_from_main(None if features is None else backend.to_device(features))
    features = np.asarray(backend.to_host(shared), np.float32)
    clips = features.shape[-1] // clip_frames
    return features, clips, record or {"path": os.path.abspath(path)}


class PoseClips:
    """S2V's pose video, as the official `load_pose_cond` reads it: from its first frame, every
    `round(video fps / fps)`-th frame (at least every frame) up to the clips' frames, each fitted
    to the video's size as the portrait is (`_fitted`; the official code fits the [-1, 1] tensor,
    so what CenterCrop pads is 0 there, grey), kept as uint8; missing frames past the video's end
    are −1 (black). `clip(k)` is clip k's condition video: its first frame repeated before its
    frames (the official code encodes that and drops the first latent frame)."""

    def __init__(self, path: str, clips: int, clip_frames: int, height: int, width: int, fps: int):
        import imageio.v3 as iio
        from PIL import Image

        meta = iio.immeta(path, plugin="FFMPEG")
        step = max(1, round(float(meta.get("fps") or fps) / fps))
        wanted = clips * clip_frames
        frames, self.padded = [], None
        for i, frame in enumerate(iio.imiter(path, plugin="FFMPEG")):
            if len(frames) == wanted:
                break
            if i % step == 0:
                pixels, self.padded = _fitted(Image.fromarray(np.asarray(frame)[..., :3]).convert("RGB"), height, width)
                frames.append(pixels)
        self.frames = np.stack(frames).round().astype(np.uint8)  # PIL's resize gives uint8 pixels: exact
        self.clip_frames, self.shape = clip_frames, (height, width)
        self.record = {
            "path": os.path.abspath(path),
            "sha256": file_sha256(path),
            "frames_read": len(frames),
            "step": step,
        }

    def clip(self, k: int) -> np.ndarray:
        """(1, 3, 1 + clip_frames, H, W) float32 in [-1, 1]: the clip's first frame, then its frames."""
        f = self.clip_frames
        video = np.full((f, *self.shape, 3), -1.0, np.float32)
        have = self.frames[k * f : (k + 1) * f]
        video[: len(have)] = have.astype(np.float32) / 255.0 * 2.0 - 1.0
        video[: len(have), self.padded] = 0.0
        video = np.concatenate([video[:1], video])
        return np.ascontiguousarray(video.transpose(3, 0, 1, 2)[None])
