"""OpenAI's content variants on a server: `thumbnail` and `spritesheet` (report/previews.py makes
the images). A completed job's are made from its frames when its mp4 is written. While a job
runs, a GET of a variant asks for a preview (the store's `preview_wanted`); the loop's next step
vote reads that on rank 0, every rank joins the one gather (pipeline/preview.py), and rank 0
writes the variants from the step's predicted clean latents — so previews cost nothing unless a
client is looking, and one gather per step while one is."""

from __future__ import annotations

import logging

from ..report.outputs import commit, stage
from ..report.previews import latent_preview, spritesheet, thumbnail
from .files import variant_path

log = logging.getLogger("parallel_wan")

MAKERS = {"thumbnail": thumbnail, "spritesheet": spritesheet}


def write_variants(settings, video_id: str, frames) -> None:
    """Both variants of `frames` (uint8 T×H×W×3), replacing any before them, all or nothing."""
    staged = []
    for variant, make in MAKERS.items():
        path, data = variant_path(settings, video_id, variant), make(frames)

        def write(tmp, data=data):
            with open(tmp, "wb") as f:
                f.write(data)

        staged.append((stage(path, write), path))
    commit(staged)


class ServerPreview:
    """One running job's preview (the generation's `preview`): `store` is rank 0's (None on the
    other ranks, which only vote)."""

    def __init__(self, backend, store, settings, video_id: str, height: int, width: int, row: int = 0):
        """`row`: the job's prompt in its batch's latents."""
        self.backend, self.store, self.settings, self.video_id = backend, store, settings, video_id
        self.size, self.row = (height, width), row

    def asked(self) -> bool:
        """Rank 0: a client asked for this job's preview."""
        return self.store is not None and self.store.preview_wanted(self.video_id)

    def wanted(self) -> bool:
        return self.backend.any_rank(self.asked())

    def show(self, steps_done: int, latents) -> None:
        try:
            write_variants(self.settings, self.video_id, latent_preview(latents[self.row], *self.size))
        except OSError as exc:  # a full disk: no preview this time; the job goes on
            log.warning("%s: a preview could not be written (%s)", self.video_id, exc.strerror or exc)
            return
        self.store.previewed(self.video_id, steps_done)


class BatchPreview:
    """A batch's previews: one vote for all of them; rank 0 writes those that were asked for."""

    def __init__(self, previews: list[ServerPreview]):
        self.previews, self.showing = previews, []

    def wanted(self) -> bool:
        self.showing = [p for p in self.previews if p.asked()]
        return self.previews[0].backend.any_rank(bool(self.showing))

    def show(self, steps_done: int, latents) -> None:
        for preview in self.showing:
            preview.show(steps_done, latents)
