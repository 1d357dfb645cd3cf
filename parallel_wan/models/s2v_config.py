"""Wan2.2-S2V-14B's dimensions beyond the Wan DiT's: the audio encoder, which blocks the audio is
injected after, and the motion frames each clip continues from. Field names follow the official
`WanModel_S2V` config (`wan/configs/wan_s2v_14B.py`, the checkpoint's `config.json`), so the
official config reads without a table; there is no diffusers S2V model.

The official model class has switches for variants it was never released with (a transformer
motioner instead of frame packing, AdaIN in another place, no zero timestep for the reference
and motion tokens); a config that turns one of them is refused by `check`, naming the setting:
only the released combination is implemented and checked against the official code.

Plain data (no torch, no jax).
"""

from __future__ import annotations

from dataclasses import dataclass

# The frame packer's groups of motion latent frames, nearest first: 1 frame at full resolution,
# 2 frames at half, 16 at a quarter (fixed in the official FramePackMotioner).
ZIP_FRAME_BUCKETS = (1, 2, 16)
REFERENCE_FRAME_POSITION = 30  # the reference image's tokens sit at RoPE frame 30 (official)
COND_MASK_ROWS = 3  # trainable_cond_mask: 0 the video's tokens, 1 the reference's, 2 the motion's
WAV2VEC_LAYERS = 25  # hidden states the audio encoder weighs: wav2vec2-large's 24 layers and its input

# the released combination of the official switches: (config key, value, what it means)
RELEASED = (
    ("enable_adain", True, "AdaIN of each frame's tokens by its global audio vector"),
    ("adain_mode", "attn_norm", "the AdaIN before the audio cross-attention"),
    ("zero_timestep", True, "the reference and motion tokens modulated at t = 0"),
    ("enable_motioner", False, "the transformer motioner (not released)"),
    ("enable_framepack", True, "the frame packer for the motion frames"),
    ("framepack_drop_mode", "padd", "motion frames missing at the start padded with zeros"),
    ("add_last_motion", True, "the nearest motion frame kept"),
    ("enable_tsm", False, "temporal shift in the motioner (not released)"),
    ("trainable_token_pos_emb", False, "learned motion-token positions (not released)"),
)
RELEASED_DEFAULTS = {
    # the official class's own defaults, for a config.json that leaves a switch out
    "enable_adain": False,
    "adain_mode": "attn_norm",
    "zero_timestep": False,
    "enable_motioner": True,
    "enable_framepack": False,
    "framepack_drop_mode": "drop",
    "add_last_motion": True,
    "enable_tsm": False,
    "trainable_token_pos_emb": False,
}


@dataclass(frozen=True)
class S2VConfig:
    audio_dim: int = 1024  # wav2vec2-large-xlsr-53's width
    num_audio_token: int = 4  # audio tokens per latent frame, besides the padding token
    audio_inject_layers: tuple[int, ...] = (0, 4, 8, 12, 16, 20, 24, 27, 30, 33, 36, 39)
    motion_frames: int = 73  # decoded frames each clip continues from (19 latent frames)
    cond_dim: int = 16  # the pose latents' channels (cond_encoder)

    @property
    def motion_latent_frames(self) -> int:
        return (self.motion_frames + 3) // 4

    @classmethod
    def from_official(cls, cfg: dict) -> S2VConfig:
        for key, value, meaning in RELEASED:
            got = cfg.get(key, RELEASED_DEFAULTS[key])
            if got != value:
                raise ValueError(
                    f"S2V config {key}={got!r}: only Wan2.2-S2V-14B's released {key}={value!r} ({meaning}) "
                    "is implemented; this checkpoint is another S2V variant"
                )
        return cls(
            audio_dim=int(cfg.get("audio_dim", 5120)),
            num_audio_token=int(cfg.get("num_audio_token", 4)),
            audio_inject_layers=tuple(int(i) for i in cfg.get("audio_inject_layers", (0, 4, 8, 12, 16, 20, 24, 27))),
            motion_frames=int(cfg.get("motion_frames", 73)),
            cond_dim=int(cfg.get("cond_dim", 0)),
        )

    def to_official(self) -> dict:
        return {
            "audio_dim": self.audio_dim,
            "num_audio_token": self.num_audio_token,
            "audio_inject_layers": list(self.audio_inject_layers),
            "motion_frames": self.motion_frames,
            "cond_dim": self.cond_dim,
            **{key: value for key, value, _ in RELEASED},
        }

    def check(self, num_layers: int, dim: int) -> None:
        """Refuse what the official forward cannot run."""
        bad = [i for i in self.audio_inject_layers if not 0 <= i < num_layers]
        if bad:
            raise ValueError(f"S2V audio_inject_layers {bad}: the transformer has blocks 0–{num_layers - 1}")
        if len(set(self.audio_inject_layers)) != len(self.audio_inject_layers):
            raise ValueError(f"S2V audio_inject_layers {list(self.audio_inject_layers)} names a block twice")
        if self.cond_dim != 16:
            raise ValueError(f"S2V cond_dim={self.cond_dim}: the pose condition is a 16-channel VAE latent")
        if dim % 4:
            raise ValueError(f"S2V: the width {dim} must be divisible by 4 (the audio encoder's first layer)")
        if self.motion_frames < 1 or (self.motion_frames + 3) // 4 > sum(ZIP_FRAME_BUCKETS):
            raise ValueError(
                f"S2V motion_frames={self.motion_frames}: 1 to {4 * sum(ZIP_FRAME_BUCKETS) - 3} frames "
                f"({sum(ZIP_FRAME_BUCKETS)} latent frames fill the frame packer)"
            )
