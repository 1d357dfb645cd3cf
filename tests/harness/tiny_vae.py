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


def random_state(variant, seed):
    """A tiny VAE of `variant` with random weights, as numpy arrays by diffusers' names."""
    import torch
    from diffusers import AutoencoderKLWan

    torch.manual_seed(seed)
    model = AutoencoderKLWan(**TINY_VAE[variant].to_diffusers()).eval()
    gen = torch.Generator().manual_seed(seed)
    # Perturb everything (norm gains too) so a row taken from the wrong place changes the output.
    return {k: (v + 0.1 * torch.randn(v.shape, generator=gen)).numpy() for k, v in model.state_dict().items()}
