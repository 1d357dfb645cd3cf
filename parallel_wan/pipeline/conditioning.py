"""Image conditioning: the input image on the host, I2V-A14B's extra channels and TI2V-5B's
held first latent frame. The VAE encode runs on the backend (`backend.vae_encode`)."""

from __future__ import annotations

import hashlib
import logging
import math
import os

import numpy as np

from ..models import transformer as dit, vae

log = logging.getLogger("parallel_wan")


def load_image(path: str, height: int, width: int) -> tuple[np.ndarray, dict]:
    """RGB image → ((1, 3, H, W) float32 in [-1, 1], a record for the sidecar).

    As diffusers' VideoProcessor.preprocess: the uint8 image is resized by PIL (Lanczos) to
    exactly height×width — stretched if the aspect ratio differs — then x/255·2 − 1 in float32.
    The official code keeps the aspect instead: I2V-A14B picks the output size from the image's
    aspect and `max_area` and resizes the [-1, 1] tensor bicubically; TI2V-5B scales (Lanczos)
    to cover `best_output_size` and centre-crops. We follow diffusers so a given height×width is
    honoured and a seed gives diffusers' video.
    """
    from PIL import Image

    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    with Image.open(path) as im:
        image, size = prepared_image(im, height, width, f"image={path}")
    record = {"path": os.path.abspath(path), "sha256": digest, "size": list(size), "resized_to": [width, height]}
    return image, record


def prepared_image(im, height: int, width: int, what: str) -> tuple[np.ndarray, tuple[int, int]]:
    """A PIL image as load_image prepares it ((1, 3, H, W) in [-1, 1]), and its own size."""
    from PIL import Image

    im = im.convert("RGB")  # as the official generate.py; drops alpha, expands grey/palette
    size = im.size
    if size != (width, height):
        if abs(size[0] * height - size[1] * width) > 0.01 * size[1] * width:
            log.warning(
                "%s is %dx%d; it is stretched to width=%d height=%d (aspect %.3f → %.3f), as diffusers does; "
                "crop it first to keep its aspect",
                what,
                size[0],
                size[1],
                width,
                height,
                size[0] / size[1],
                width / height,
            )
        im = im.resize((width, height), resample=Image.LANCZOS)
    arr = np.asarray(im, dtype=np.float32) / 255.0
    return (arr * 2.0 - 1.0).transpose(2, 0, 1)[None], size


def i2v_condition(image, num_frames: int, latent_frames: int, vae_cfg, vae_params, ops, backend, last=None):
    """I2V-A14B's 20 extra channels: a 4-channel frame mask (one channel per frame of the
    temporal stride) and the VAE latent of [image, black frames…] — with a last frame `last`
    (first-last-frame video), [image, black frames…, last], as diffusers' `last_image` does."""
    _, _, h, w = image.shape  # host array (1, 3, H, W)
    frames = [image[:, :, None], np.zeros((1, 3, num_frames - 1 - (last is not None), h, w), np.float32)]
    video = np.concatenate(frames + ([last[:, :, None]] if last is not None else []), axis=2)
    latent = vae.normalize_latents(backend.vae_encode(vae_params, video, vae_cfg), vae_cfg, ops)
    stride = vae_cfg.scale_factor_temporal
    lh, lw = latent.shape[-2:]
    mask = np.zeros((1, stride, latent_frames, lh, lw), np.float32)
    mask[:, :, 0] = 1.0  # the first latent frame carries the given image (all `stride` sub-frames)
    if last is not None:  # frame num_frames − 1: the last latent frame's last sub-frame
        mask[:, stride - 1, latent_frames - 1] = 1.0
    return ops.concat([backend.to_device(mask), latent], axis=1)


def ti2v_first_frame(image, latent_frames, grid, vae_cfg, tcfg, vae_params, ops, backend):
    """TI2V-5B: the image's latent is the first latent frame, re-imposed every step (its tokens
    see t = 0). Returns the tokens to hold and a (tokens, 1) host mask, 0 where held.

    The official code writes the latent back into the sampler's state after each step;
    diffusers only into the model's input (and once after the loop). Both give the same video:
    the sampler update is elementwise, so the held tokens' sampler state never reaches another
    token. The image is encoded alone (one frame), not as [image, black frames] as for I2V.
    """
    z = backend.vae_encode(vae_params, image[:, :, None], vae_cfg)
    z = vae.normalize_latents(z, vae_cfg, ops)
    rest = ops.zeros((1, z.shape[1], latent_frames - 1) + tuple(z.shape[-2:]), "float32", like=z)
    held = dit.patchify(ops.concat([z, rest], axis=2), tcfg.patch_size, ops)
    mask = np.ones((math.prod(grid), 1), np.float32)
    mask[: grid[1] * grid[2]] = 0.0
    return held, mask
