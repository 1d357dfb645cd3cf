"""A running job's preview as the tests check it: one process's preview at the same step (the
reference a server's preview is compared with), and the wait for a server's preview to appear."""

import io
import time


class RecordingPreview:
    """One process's preview at `step` only: the latents a server's preview would project there."""

    def __init__(self, step):
        self.step, self.steps_done, self.latents = step, 0, None

    def wanted(self):
        self.steps_done += 1
        return self.steps_done == self.step

    def show(self, steps_done, latents):
        self.latents = (steps_done, latents)


class EveryStepPreview:
    """A preview wanted after every step it is asked about: the (steps done, latents' shape) shown."""

    def __init__(self):
        self.shown = []

    def wanted(self):
        return True

    def show(self, steps_done, latents):
        self.shown.append((steps_done, tuple(latents.shape)))


def preview_image(start, step, height, width, **settings):
    """The thumbnail (decoded, RGB) one torch process's preview at `step` makes for the settings
    `start` + `settings`."""
    from PIL import Image

    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.config.compose import compose_spec
    from parallel_wan.pipeline import generate, preflight
    from parallel_wan.report.previews import latent_preview, thumbnail

    words = [*[w for w in start if not w.startswith("backend=") and not w.startswith("mesh=")]]
    words += [f"{k}={v}" for k, v in settings.items()]
    spec = compose_spec(words, 1, output_dir="/tmp/unused")
    preview = RecordingPreview(step)
    generate(spec, start_torch_backend("cpu"), preflight(spec), preview=preview)
    assert preview.latents is not None and preview.latents[0] == step, preview.latents
    image = thumbnail(latent_preview(preview.latents[1][0], height, width))
    return Image.open(io.BytesIO(image)).convert("RGB")


def wait_for_preview(server, url, variant="thumbnail", hang_s=300.0):
    """GET the variant of a running job until its preview is there (the first GET asked for it);
    only a server that died or hangs fails the wait."""
    deadline = time.monotonic() + hang_s
    while time.monotonic() < deadline and server.alive():
        answer = server.client.get(url, params={"variant": variant})
        if answer.status_code == 200:
            return answer
        time.sleep(0.02)
    server.fail(f"no preview of {url}")
