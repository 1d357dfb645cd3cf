"""Changing resolution in the Wan VAE: strided/upsampling resample layers (both VAEs), the
parameter-free AvgDown3D / DupUp3D shortcuts of the Wan 2.2 residual blocks, and the 2×2
pixel patchify in front of the Wan 2.2 encoder. Arrays are (B, C, T, H, W)."""

from __future__ import annotations

from .vae_causal import CACHE_FRAMES, Array, TimeCache, causal_conv3d


def _resample_conv(p):
    """diffusers' `resample` is Sequential(pad or upsample, Conv2d): the conv is entry 1
    (entry 0 has no parameters, so the tree holds None there)."""
    return p["resample"][1]


def _per_frame_conv2d(x, conv, ops, stride=(1, 1), padding=(0, 0)) -> Array:
    """The reference runs its spatial resample convs as 2D convs on (B·T, C, H, W)."""
    b, c, t, h, w = x.shape
    frames = ops.reshape(ops.transpose(x, (0, 2, 1, 3, 4)), (b * t, c, h, w))
    frames = ops.conv2d(frames, conv["weight"], conv.get("bias"), stride=stride, padding=padding)
    _, c2, h2, w2 = frames.shape
    return ops.transpose(ops.reshape(frames, (b, t, c2, h2, w2)), (0, 2, 1, 3, 4))


def downsample(p, x, ops, cache: TimeCache, name: str) -> Array:
    """Halve H and W (zero pad right/bottom by one, 3×3 stride 2); with a `time_conv`, also
    halve T with a 3-tap stride-2 conv over [last frame of the previous chunk, this chunk].

    The first chunk (one frame) skips the temporal conv, so 1 frame stays 1 frame and every
    later chunk of 4 frames gives 2 (then 1 at the next level): 1 + 4k frames → 1 + k.
    """
    x = ops.pad(x, [(0, 0), (0, 0), (0, 0), (0, 1), (0, 1)])
    x = _per_frame_conv2d(x, _resample_conv(p), ops, stride=(2, 2))
    if "time_conv" not in p:
        return x
    key = f"{name}.time_conv"
    if cache.first_chunk:
        cache.keep(key, x[:, :, x.shape[2] - 1 :])
        return x
    last = cache.past(key, x, 1, ops)
    cache.keep(key, x[:, :, x.shape[2] - 1 :])
    tc = p["time_conv"]
    return ops.conv3d(ops.concat([last, x], axis=2), tc["weight"], tc.get("bias"), stride=(2, 1, 1))


def upsample(p, x, ops, cache: TimeCache, name: str) -> Array:
    """Double H and W (nearest, then 3×3 conv); with a `time_conv`, first double T: a causal
    3-tap conv makes 2C channels that become two frames per input frame.

    The first chunk skips the temporal doubling (one latent frame → one video frame); its
    cache entry starts as zeros, which is what the reference's zero-padded second call sees.
    """
    if "time_conv" in p:
        key = f"{name}.time_conv"
        if cache.first_chunk:
            cache.keep(key, cache.past(key, x, CACHE_FRAMES, ops))
        else:
            b, c, t, h, w = x.shape
            x = causal_conv3d(p["time_conv"], x, ops, cache, key)
            x = ops.reshape(x, (b, 2, c, t, h, w))
            x = ops.reshape(ops.transpose(x, (0, 2, 3, 1, 4, 5)), (b, c, 2 * t, h, w))
    # nearest-exact with an exact factor of 2 copies each pixel twice along H and W.
    x = ops.repeat(ops.repeat(x, 2, axis=3), 2, axis=4)
    return _per_frame_conv2d(x, _resample_conv(p), ops, padding=(1, 1))


def avg_down_3d(x, out_channels: int, factor_t: int, factor_s: int, ops) -> Array:
    """Wan 2.2's down-block shortcut: fold each factor_t×factor_s×factor_s neighbourhood into
    channels, then average groups of channels down to `out_channels`. A chunk with an odd
    frame count (the first, one frame) is zero-padded in front to a whole temporal group."""
    b, c, t, h, w = x.shape
    pad_t = (factor_t - t % factor_t) % factor_t
    if pad_t:
        x = ops.pad(x, [(0, 0), (0, 0), (pad_t, 0), (0, 0), (0, 0)])
        t += pad_t
    factor = factor_t * factor_s * factor_s
    x = ops.reshape(x, (b, c, t // factor_t, factor_t, h // factor_s, factor_s, w // factor_s, factor_s))
    x = ops.transpose(x, (0, 1, 3, 5, 7, 2, 4, 6))
    x = ops.reshape(x, (b, out_channels, c * factor // out_channels, t // factor_t, h // factor_s, w // factor_s))
    return ops.mean(x, axis=2)


def dup_up_3d(x, out_channels: int, factor_t: int, factor_s: int, first_chunk: bool, ops) -> Array:
    """Wan 2.2's up-block shortcut, the inverse layout of avg_down_3d: repeat channels, then
    unfold them into factor_t×factor_s×factor_s neighbourhoods. On the first chunk the
    temporal upsample makes one frame, not factor_t, so the leading copies are dropped."""
    b, c, t, h, w = x.shape
    factor = factor_t * factor_s * factor_s
    x = ops.repeat(x, out_channels * factor // c, axis=1)
    x = ops.reshape(x, (b, out_channels, factor_t, factor_s, factor_s, t, h, w))
    x = ops.transpose(x, (0, 1, 5, 2, 6, 3, 7, 4))
    x = ops.reshape(x, (b, out_channels, t * factor_t, h * factor_s, w * factor_s))
    if first_chunk:
        x = x[:, :, factor_t - 1 :]
    return x


def patchify(x, patch: int | None, ops) -> Array:
    """(B, C, T, p·h, p·w) → (B, C·p·p, T, h, w); channel order (c, column offset, row offset),
    as the official `rearrange("b c f (h q) (w r) -> b (c r q) f h w")`."""
    if not patch or patch == 1:
        return x
    b, c, t, hp, wp = x.shape
    h, w = hp // patch, wp // patch
    x = ops.reshape(x, (b, c, t, h, patch, w, patch))
    x = ops.transpose(x, (0, 1, 6, 4, 2, 3, 5))
    return ops.reshape(x, (b, c * patch * patch, t, h, w))


def unpatchify(x, patch: int | None, ops) -> Array:
    """Inverse of `patchify`."""
    if not patch or patch == 1:
        return x
    b, cpp, t, h, w = x.shape
    c = cpp // (patch * patch)
    x = ops.reshape(x, (b, c, patch, patch, t, h, w))
    x = ops.transpose(x, (0, 1, 4, 5, 3, 6, 2))
    return ops.reshape(x, (b, c, t, h * patch, w * patch))
