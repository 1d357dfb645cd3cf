"""Shape of a Wan video VAE: the fields of diffusers' AutoencoderKLWan config, plus presets.

Two checkpoints exist. Wan 2.1's VAE (used by T2V-A14B and I2V-A14B) has z 16 and a 4×8×8
stride; Wan 2.2's (TI2V-5B) has z 48, residual down/up blocks, a wider decoder than encoder
and a 2×2 pixel patchify in front, for a 4×16×16 stride.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

# Per-channel latent statistics, from the official wan/modules/vae2_1.py (Wan2_1_VAE) and
# vae2_2.py (Wan2_2_VAE); diffusers' configs hold the same numbers.
WAN2_1_LATENTS_MEAN = (
    -0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
    0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921,
)  # fmt: skip
WAN2_1_LATENTS_STD = (
    2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
    3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160,
)  # fmt: skip
WAN2_2_LATENTS_MEAN = (
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557,
    -0.1382, 0.0542, 0.2813, 0.0891, 0.1570, -0.0098, 0.0375, -0.1825,
    -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
    -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230,
    -0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.0520, 0.3748,
    0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667,
)  # fmt: skip
WAN2_2_LATENTS_STD = (
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013,
    0.8158, 1.0344, 0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978,
    0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
    0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093,
    0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
    0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744,
)  # fmt: skip

_TUPLE_FIELDS = ("dim_mult", "attn_scales", "temperal_downsample", "latents_mean", "latents_std")


@dataclass(frozen=True)
class VaeConfig:
    # Names and defaults are diffusers' AutoencoderKLWan config (its defaults are Wan 2.1's),
    # misspelling of "temperal" included, so a checkpoint's config.json reads in unchanged.
    base_dim: int = 96
    decoder_base_dim: int | None = None
    z_dim: int = 16
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    attn_scales: tuple[float, ...] = ()
    temperal_downsample: tuple[bool, ...] = (False, True, True)
    dropout: float = 0.0
    latents_mean: tuple[float, ...] = WAN2_1_LATENTS_MEAN
    latents_std: tuple[float, ...] = WAN2_1_LATENTS_STD
    is_residual: bool = False
    in_channels: int = 3
    out_channels: int = 3
    patch_size: int | None = None
    scale_factor_temporal: int | None = 4
    scale_factor_spatial: int | None = 8
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        for name in _TUPLE_FIELDS:
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.attn_scales:
            raise ValueError(
                f"VAE config: attn_scales is {list(self.attn_scales)}, but only [] is supported: neither "
                "Wan VAE checkpoint has attention outside the middle blocks, and diffusers' "
                "AutoencoderKLWan cannot run it either; set attn_scales to []"
            )
        levels = len(self.dim_mult)
        if len(self.temperal_downsample) < levels - 1:
            raise ValueError(
                f"VAE config: temperal_downsample {list(self.temperal_downsample)} has fewer than "
                f"len(dim_mult) - 1 = {levels - 1} entries; give one flag per downsampling level"
            )
        for name in ("latents_mean", "latents_std"):
            if len(getattr(self, name)) != self.z_dim:
                raise ValueError(
                    f"VAE config: {name} has {len(getattr(self, name))} values but z_dim is {self.z_dim}; "
                    "give one value per latent channel"
                )
        for name, derived in (
            ("scale_factor_temporal", self._derived_temporal_stride()),
            ("scale_factor_spatial", self._derived_spatial_stride()),
        ):
            given = getattr(self, name)
            if given is not None and given != derived:
                raise ValueError(
                    f"VAE config: {name} is {given} but dim_mult, temperal_downsample and patch_size "
                    f"give a stride of {derived}; set {name} to {derived}"
                )
        pixel_channels = self.in_channels // self.patch_factor
        if pixel_channels * self.patch_factor != self.in_channels:
            raise ValueError(
                f"VAE config: in_channels {self.in_channels} is not a multiple of patch_size² = "
                f"{self.patch_factor}; the encoder sees patchified pixels, so set in_channels to "
                f"3 × {self.patch_factor}"
            )

    # ------------------------------------------------------------------ derived sizes
    @property
    def decoder_dim(self) -> int:
        return self.decoder_base_dim if self.decoder_base_dim is not None else self.base_dim

    @property
    def patch_factor(self) -> int:
        """Pixels folded into channels by the patchify in front of the encoder (1 or p²)."""
        return (self.patch_size or 1) ** 2

    @property
    def temperal_upsample(self) -> tuple[bool, ...]:
        return self.temperal_downsample[::-1]

    @property
    def temporal_stride(self) -> int:
        """Video frames per latent frame (after the first, which maps 1 → 1)."""
        return self._derived_temporal_stride()

    @property
    def spatial_stride(self) -> int:
        """Pixels per latent pixel along height and width."""
        return self._derived_spatial_stride()

    def _derived_temporal_stride(self) -> int:
        return 2 ** sum(bool(f) for f in self.temperal_downsample[: len(self.dim_mult) - 1])

    def _derived_spatial_stride(self) -> int:
        return 2 ** (len(self.dim_mult) - 1) * (self.patch_size or 1)

    # ------------------------------------------------------------------ conversions
    @classmethod
    def from_diffusers(cls, cfg: dict) -> VaeConfig:
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        kwargs = {k: v for k, v in cfg.items() if k in known}
        return cls(**kwargs, extra={k: v for k, v in cfg.items() if k not in known})

    def to_diffusers(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        for name in _TUPLE_FIELDS:
            d[name] = list(d[name])
        return d

    # ------------------------------------------------------------------ presets
    @classmethod
    def wan2_1(cls) -> VaeConfig:
        """`Wan2.1_VAE.pth` (T2V-A14B, I2V-A14B)."""
        return cls()

    @classmethod
    def wan2_2(cls) -> VaeConfig:
        """`Wan2.2_VAE.pth` (TI2V-5B)."""
        return cls(
            base_dim=160,
            decoder_base_dim=256,
            z_dim=48,
            is_residual=True,
            in_channels=12,
            out_channels=12,
            patch_size=2,
            scale_factor_temporal=4,
            scale_factor_spatial=16,
            latents_mean=WAN2_2_LATENTS_MEAN,
            latents_std=WAN2_2_LATENTS_STD,
        )
