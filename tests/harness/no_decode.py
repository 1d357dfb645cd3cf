"""A video decoder that decodes nothing, for tests that compare latents or what the denoising
loop does (step caches, resumed loops): `backend.video_decoder = lambda params, cfg: NoDecode()`.
The decode itself is tested where it is the subject (the CLI, the fake-GPU mesh presets)."""


class NoDecode:
    def compile(self, latent_shape):
        return {}

    def __call__(self, latents):
        return []
