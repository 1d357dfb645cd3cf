"""Tiny VAE configs shared by the VAE tests: every structural feature of the real ones (4
levels, temporal down/upsampling at two of them, attention middle blocks; Wan 2.2's residual
z48 VAE with its 2×2 patchify), at widths that run in seconds on a CPU."""

from parallel_wan.models.vae_config import WAN2_2_LATENTS_MEAN, WAN2_2_LATENTS_STD, VaeConfig

TINY_VAE = {
    "wan2.1": VaeConfig(base_dim=8, z_dim=16, num_res_blocks=1),
    "wan2.2": VaeConfig(
        base_dim=8,
        decoder_base_dim=12,
        z_dim=48,
        num_res_blocks=1,
        is_residual=True,
        in_channels=12,
        out_channels=12,
        patch_size=2,
        scale_factor_spatial=16,
        latents_mean=WAN2_2_LATENTS_MEAN,
        latents_std=WAN2_2_LATENTS_STD,
    ),
}
