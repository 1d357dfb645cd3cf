"""Runs from a video (config/source_video.py). Video-to-video's start: the source video's first
`num_frames` frames resized as diffusers' VideoProcessor.preprocess_video resizes them (PIL
Lanczos to exactly height×width, then x/255·2 − 1 in float32), encoded by the VAE (its mean:
diffusers' "argmax"), normalised, and mixed with the seeded noise at the first step's σ as
UniPC's add_noise and the flow-matching scale_noise do: (1 − σ)·source + σ·noise. The encode is
split by height over the ranks (backend.vae_encode); every rank gets the whole latents and keeps
its tokens. An extension's: the last frame of the video it continues, prepared as an image= is,
and the output — that video's frames, then the new ones after the shared first frame."""

from __future__ import annotations

import hashlib

import numpy as np

from ..models import transformer as dit, vae


def load_video(path: str, num_frames: int, height: int, width: int) -> tuple[np.ndarray, dict]:
    """(1, 3, num_frames, H, W) float32 in [-1, 1] and a record for the sidecar."""
    import imageio.v3 as iio
    from PIL import Image

    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    frames = []
    for frame in iio.imiter(path):
        if len(frames) == num_frames:
            break
        image = Image.fromarray(np.asarray(frame)[..., :3]).convert("RGB")
        size = image.size
        if size != (width, height):
            image = image.resize((width, height), resample=Image.LANCZOS)
        frames.append(np.asarray(image, dtype=np.float32) / 255.0)
    video = (np.stack(frames) * 2.0 - 1.0).transpose(3, 0, 1, 2)[None]  # (1, 3, F, H, W)
    record = {"sha256": digest, "frames": num_frames, "size": list(size), "resized_to": [width, height]}
    return np.ascontiguousarray(video), record


def source_tokens(spec, vae_params, vae_cfg, patch_size, backend):
    """The normalised latents of the source video as patch tokens (1 row), on the device."""
    video, record = load_video(spec.video.video, spec.video.num_frames, spec.video.height, spec.video.width)
    z = vae.normalize_latents(backend.vae_encode(vae_params, video, vae_cfg), vae_cfg, backend.ops)
    return dit.patchify(z, patch_size, backend.ops), record


def noised(source, noise, sigma: float, rows: int, ops):
    """(1 − σ)·source + σ·noise for each of `rows` rows, in float32 as the schedulers compute it."""
    sigma32 = np.float32(sigma)
    alpha32 = np.float32(1.0) - sigma32
    if rows > 1:
        source = ops.concat([source] * rows, axis=0)
    return source * float(alpha32) + noise * float(sigma32)


def last_frame(path: str, height: int, width: int) -> tuple[np.ndarray, dict]:
    """The last frame of the video an extension continues, as load_image prepares an image."""
    import imageio.v3 as iio
    from PIL import Image

    from .conditioning import prepared_image

    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    count, frame = 0, None
    for frame in iio.imiter(path):
        count += 1
    image, size = prepared_image(Image.fromarray(np.asarray(frame)[..., :3]), height, width, f"extend={path}'s frames")
    return image, {"extends": {"sha256": digest, "frames": count, "size": list(size)}}


def extended(path: str, new_frames: np.ndarray) -> np.ndarray:
    """The video at `path` (its frames at the new frames' size) followed by `new_frames` after
    their first, which is the source's last."""
    import imageio.v3 as iio
    from PIL import Image

    height, width = new_frames.shape[1:3]
    source = []
    for frame in iio.imiter(path):
        image = Image.fromarray(np.asarray(frame)[..., :3]).convert("RGB")
        if image.size != (width, height):
            image = image.resize((width, height), resample=Image.LANCZOS)
        source.append(np.asarray(image, dtype=np.uint8))
    return np.concatenate([np.stack(source), new_frames[1:]])
