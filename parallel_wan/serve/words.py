"""The server's answers in the words of a request. resolve() and the run's checks speak to the
command line (`steps=0 must be at least 1`, `set image=PATH`, `output_dir=/srv/…`); a client sent
fields (fields.py), not settings, and must never learn where the server keeps its files. Every
text of ours a client reads passes through here — a refusal, a failed job's error, a completed
job's record, /health's problem — so that it

- names each setting a request sets by the request's field, from one table (fields.FIELD_OF);
  a setting copied from another field (guidance_low from guidance_scale alone) by that field;
- shows no server path: an uploaded image is its field (the value dropped); the server's own
  paths (storage_dir, the checkpoint, every existing path among the start settings) and any
  other absolute path read "(a path on the server)";
- (a refusal) says which of the settings it names were fixed when the server started.
"""

from __future__ import annotations

import os
import re

from ..config.checks import known_keys
from .fields import FIELD_OF, GUIDANCE_ALIASES, SETTING_OF, VIDEO_INPUTS

HIDDEN = "(a path on the server)"
# run settings a server sets from its own (settings.py): said by the server's name
SERVER_SETTING = {"output_dir": "storage_dir"}
# fields whose setting's value is a file the server stored: never shown
UPLOADS = ("input_reference", "video", *VIDEO_INPUTS)
_MARK = "\0"  # a hidden path while the settings are renamed (no spaces, so `image=` takes it as its value)
# `setting=` or `setting.key=`, not the end of a longer name (num_inference_steps=, cache.steps=)
_SETTING = re.compile(r"(?<![\w.])([a-z_][a-z0-9_]*)((?:\.[a-z_][a-z0-9_]*)*)=")
# an absolute path: a / that continues no word, number, URL or path, up to a space, a quote or a separator
_TAIL = r"[^\s'\"`,;:()\[\]<>]*"
_ABSOLUTE = re.compile(r"(?<![\w.:/~-])/" + _TAIL)
_UPLOAD_SETTINGS = "|".join(s for s, f in FIELD_OF.items() if f in UPLOADS)
_UPLOADED = re.compile(rf"(?<![\w.])({_UPLOAD_SETTINGS})=[^\s;,]*")
_CLIENTS_OWN = ("prompt", "prompts", "negative_prompt")  # record keys holding the client's own text


class Words:
    def __init__(self, paths=()):
        """`paths`: the server's own paths (also relative ones, and ones with spaces, which the
        absolute-path rule alone would miss)."""
        self.paths = tuple(sorted({str(p) for p in paths if p}, key=len, reverse=True))

    def including(self, *paths) -> Words:
        return Words((*self.paths, *paths))

    def refusal(self, exc, source: dict | None = None, upload: str | None = None) -> tuple[str, str | None]:
        """(the message in the request's words, the field it is about) of a ConfigError of the
        run's checks: the field that set the first of the settings the error is about
        (`ConfigError.setting`), else the field of the first such setting. `source`: setting →
        the field that set it (fields.request_settings); `upload`: where the request's image was
        stored."""
        source, message = source or {}, str(exc)
        named = [(m.group(1), m.group(1) + m.group(2)) for m in _SETTING.finditer(message)]
        fixed = list(
            dict.fromkeys(
                SERVER_SETTING.get(name, name)
                for top, name in named
                if top in known_keys() and top not in FIELD_OF and top != "model"
            )
        )
        text = self.public(message, source, upload)
        if fixed:
            them = "it" if len(fixed) == 1 else "them"
            text += f" ({', '.join(fixed)}: set when this server started; a request cannot change {them})"
        about = [setting for setting in exc.settings if setting in FIELD_OF]
        param = next((source[s] for s in about if s in source), None) or (FIELD_OF[about[0]] if about else None)
        return text, param

    def public(self, text: str, source: dict | None = None, upload: str | None = None) -> str:
        """`text` with each setting a request sets named by its field and no server path."""
        source = source or {}
        for path in sorted((*self.paths, *([upload] if upload else [])), key=len, reverse=True):
            text = re.sub(re.escape(path) + _TAIL, _MARK, text)  # with what follows it: a file in that folder
        text = _ABSOLUTE.sub(_MARK, text)

        # an upload's setting with its value (its path, the CLI's placeholder PATH, or none): the field alone
        text = _UPLOADED.sub(lambda m: source.get(m.group(1)) or FIELD_OF[m.group(1)], text)

        def field(m: re.Match) -> str:
            setting, rest = m.group(1), m.group(2)
            if setting in SERVER_SETTING:
                return SERVER_SETTING[setting] + rest + "="
            if rest or setting not in FIELD_OF:
                return m.group(0)
            # guidance_low from guidance_scale, guidance_high from true_cfg_scale: the field sent
            copied = source.get(setting) in SETTING_OF or source.get(setting) in GUIDANCE_ALIASES
            return (source[setting] if copied else FIELD_OF[setting]) + "="

        return _SETTING.sub(field, text).replace(_MARK, HIDDEN)

    def record(self, value, key: str | None = None):
        """A job's sidecar record as a client may read it: every string but the client's own
        texts (the prompts) without server paths; a value that is an absolute path, hidden whole."""
        if isinstance(value, dict):
            return {k: self.record(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self.record(v, key) for v in value]
        if isinstance(value, str) and key not in _CLIENTS_OWN:
            return HIDDEN if value.startswith(os.sep) else self.public(value)  # a whole path, spaces and all
        return value


def server_paths(raw: dict, *folders) -> list[str]:
    """The paths among a server's start settings (any string naming an existing file or folder,
    as given and absolute) and its own `folders`."""
    found = list(folders)

    def walk(value):
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)
        elif isinstance(value, str) and os.sep in value and os.path.exists(value):
            found.extend((value, os.path.abspath(value)))

    walk(raw)
    return found
