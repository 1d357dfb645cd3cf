"""What a server serves: the start settings, checked once, and the `RequestResolver` that resolves
every request's settings on top of them by the same `resolve()` and checks the command line runs
(so a bad request gets the CLI's one line, and a good one the CLI's video). Every rank resolves a
job's settings itself from the same words. Cheap: no torch."""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass

from ..config import ConfigError, RunSpec, resolve
from ..config.placeholder_image import placeholder_image
from ..entry.entry_check import check_entry
from ..memory_plan.fits import check_fits
from ..pipeline.checkpoint import preflight
from .fields import LORA_FIELDS, RequestError, present, request_settings
from .lora_registry import lora_registry, request_loras, with_request_loras
from .words import Words, server_paths


@dataclass(frozen=True)
class RequestResolver:
    """The checked start settings, and each request or job resolved into its run settings on top of them."""

    raw: dict  # the composed start settings, the mesh fixed to the first one's
    base: RunSpec  # the start settings resolved: model, mesh, backend … of every job
    ckpt: object  # the checkpoint's description (None: the built-in tiny model)
    world: int
    node_size: int | None
    videos_dir: str
    device: tuple  # (bytes one device holds or None, where that comes from): memory_plan.fits.device_memory, once
    aliases: tuple = ()  # the operator's served_model_names (settings.py)
    loras: dict = dataclasses.field(default_factory=dict)  # name → RegisteredLora a request may name (lora_dir=)

    @property
    def model(self) -> str:
        return self.base.model.name

    @property
    def folder(self) -> str | None:
        """The checkpoint folder's name (None: the built-in tiny model, which has none of its own)."""
        root = getattr(self.ckpt, "root", None)
        return os.path.basename(os.path.normpath(str(root))) if root is not None else None

    @property
    def names(self) -> tuple:
        """What a request's `model` may say: the preset's name, the checkpoint folder's name (and
        a Hugging Face id `org/<that name>`: model_named) and the operator's served_model_names."""
        return tuple(dict.fromkeys(n for n in (self.model, self.folder, *self.aliases) if n))

    def model_named(self, name: str) -> bool:
        org, slash, last = name.rpartition("/")
        return name in self.names or bool(slash and org and self.folder and last == self.folder)

    def unknown_model(self, name: str) -> RequestError:
        return RequestError(
            f"model={name!r} is not served here; this server answers to model={', '.join(self.names)} "
            "(leave model out, or start a server with served_model_names=…)",
            "model",
            status=404,
            code="model_not_found",
        )

    @functools.cached_property
    def words(self) -> Words:
        """How answers say the run's messages (words.py): the paths to hide are the start
        settings' and the server's videos folder and checkpoint."""
        return Words(server_paths(self.raw, self.videos_dir, getattr(self.ckpt, "root", None)))

    def spec(self, settings: dict) -> RunSpec:
        """A job's settings (a request's, as run settings) → its RunSpec, checked as a job's
        entries are (entry/entry_check.py). Raises ConfigError."""
        raw = {**self.raw, **settings, "output_dir": self.videos_dir, "mesh": self.base.mesh.to_dict()}
        spec = resolve(raw, self.world, self.node_size)
        check_entry(spec, self.ckpt, self.device)
        return spec

    def request(
        self,
        fields: dict,
        image: str | None = None,
        image_field: str = "input_reference",
        video: str | None = None,
        base: dict | None = None,
        video_setting: str = "video",
        last_image: str | None = None,
        audio: str | None = None,
        videos: dict | None = None,
    ):
        """(spec, run settings, bookkeeping: user and metadata) of a request's fields (and its
        stored image, sent as `image_field`; a remix's or an edit's stored source `video` — an
        extension's, with `video_setting="extend"` — and the source job's run settings `base`,
        which the request's fields override; `last_image`: the stored last frame; `audio`: S2V's
        stored speech; `videos`: Animate's stored driving videos by field); raises RequestError."""
        model = fields.get("model")
        if isinstance(model, str) and not self.model_named(model):  # not a string: request_settings says so
            raise self.unknown_model(model)
        edit = video is not None and video_setting == "video"  # strength: a remix's or an edit's
        fields, named = _lora_fields(fields)
        settings, source, notes = request_settings(fields, self.base.model.fps, edit=edit)
        loras, recipe, lora_settings = [], {}, {}
        for key, value in named.items():  # at most one: loras or lora
            loras, recipe = request_loras(value, self.loras, len(self.base.model.variant.experts), key)
            lora_settings = with_request_loras(self.base.weights.loras, loras)
            source |= dict.fromkeys(lora_settings, key)
        settings = {**(base or {}), **recipe, **lora_settings, **settings}
        if image is not None:
            settings["image"], source["image"] = image, image_field
        if last_image is not None:  # first-last-frame video: the stored upload of `last_image`
            settings["last_image"], source["last_image"] = last_image, "last_image"
        if audio is not None:  # S2V: the stored upload of `audio_reference`
            settings["audio"], source["audio"] = audio, "audio_reference"
        for name, path in (videos or {}).items():  # Animate: pose_video, face_video, … (setting = field)
            settings[name], source[name] = path, name
        if video is not None:  # video= (a remix, an edit) or extend= (an extension): the request's `video`
            settings[video_setting], source[video_setting] = video, "video"
        try:
            return self.spec(settings), settings, notes
        except ConfigError as exc:  # the CLI's line, said of the request's fields (words.py)
            raise RequestError(*self.words.refusal(exc, source, image)) from None


def _lora_fields(fields: dict) -> tuple[dict, dict]:
    """(the fields without the LoRAs they name, {"loras" or "lora": value}) — also from inside
    vLLM-Omni's `extra_params`."""
    named = {key: value for key, value in present(fields).items() if key in LORA_FIELDS}
    fields = {key: value for key, value in fields.items() if key not in LORA_FIELDS}
    extra = fields.get("extra_params")
    if isinstance(extra, dict) and any(key in extra for key in LORA_FIELDS):
        named |= {key: value for key, value in present(extra).items() if key in LORA_FIELDS}
        fields["extra_params"] = {key: value for key, value in extra.items() if key not in LORA_FIELDS}
    if len(named) > 1:
        raise RequestError("loras and lora each name LoRAs; give one of them", "lora")
    return fields, named


def serve_start(
    raw: dict,
    world: int,
    node_size: int | None,
    videos_dir: str,
    device: tuple | None = None,
    lora_dir: str | None = None,
    check_loras: bool = True,
) -> RequestResolver:
    """The start settings checked as run.py checks a run (the checkpoint's headers, the fit);
    the mesh (mesh=auto decides it here) then holds for every job. `device`: the device's memory
    as rank 0 found it (None: ask now — on the process that owns the device). Raises ConfigError."""
    from ..memory_plan.fits import device_memory

    with placeholder_image(raw) as image:  # an i2v model's image comes with each request
        base = resolve({**raw, "output_dir": videos_dir, **image}, world, node_size)
    ckpt = preflight(base)
    device = tuple(device) if device is not None else device_memory(base)
    check_fits(base, ckpt, device=device)
    served = RequestResolver({**raw, "mesh": base.mesh.to_dict()}, base, ckpt, world, node_size, videos_dir, device)
    registry = lora_registry(lora_dir)
    for lora in registry.values() if check_loras else ():  # each checked as lora= is on the command line,
        for what, settings in ((lora.path, {}), (os.path.splitext(lora.path)[0] + ".json", lora.recipe)):
            try:  # the file, then with its recipe (which must run on this server's mesh)
                served.spec({"lora": lora.path} | settings)
            except ConfigError as exc:
                raise ConfigError(f"lora_dir: {os.path.basename(what)}: {exc}", setting="lora_dir") from None
    return dataclasses.replace(served, loras=registry)
