"""A LoRA file, opened as untrusted input: names, shapes and metadata from the header only, and
tensors (or a range of their rows) read on demand, with the bytes read counted.

Safetensors is the format (a header and raw bytes: nothing in it can run). A `.pth`/`.pt` file
is read only with `torch.load(weights_only=True)`, which refuses anything but tensors and plain
containers; anything else in it is an error, not a warning.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from ..errors import ConfigError
from ..weights.finite import non_finite, refuse
from ..weights.safetensors_io import MappedFile
from .settings import SAFETENSORS

# Where diffusers keeps a PEFT adapter's config (r, lora_alpha, patterns) in the header.
ADAPTER_METADATA = "lora_adapter_metadata"


class LoraFile:
    def __init__(self, path: str, setting: str = "lora"):
        self.path, self.setting = path, setting
        self.bytes_read = 0
        self.metadata: dict = {}
        where = f"{setting}={path}"
        if path.endswith(SAFETENSORS):
            try:
                self._file = safe_open(path, framework="pt")
                self.metadata = dict(self._file.metadata() or {})
                self.shapes = {k: tuple(self._file.get_slice(k).get_shape()) for k in self._file.keys()}
                self.dtypes = {k: self._file.get_slice(k).get_dtype() for k in self._file.keys()}
            except (SafetensorError, OSError, ValueError) as exc:
                raise ConfigError(
                    f"{where} is not a readable safetensors file ({exc}); re-download or convert it"
                ) from None
            self._tensors = None
            self._mapped = None  # the tensors' bytes, mapped on first read (weights/safetensors_io.py)
        else:
            try:
                data = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except Exception as exc:  # pickle errors come in many types; none may pass silently
                raise ConfigError(
                    f"{where} could not be read with torch.load(weights_only=True) "
                    f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); convert it to safetensors"
                ) from None
            if isinstance(data, dict) and "state_dict" in data and isinstance(data["state_dict"], dict):
                data = data["state_dict"]
            if not isinstance(data, dict) or not all(
                isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in data.items()
            ):
                raise ConfigError(f"{where} does not hold a flat name → tensor dict; convert it to safetensors")
            self._tensors = data
            self.shapes = {k: tuple(v.shape) for k, v in data.items()}
            self.dtypes = {k: str(v.dtype) for k, v in data.items()}
        if not self.shapes:
            raise ConfigError(f"{where} holds no tensors")

    @property
    def name(self) -> str:
        return Path(self.path).name

    def identity(self) -> dict:
        """What names this file's content for a cache key: path, size and modification time."""
        st = os.stat(self.path)
        return {"path": self.path, "size": st.st_size, "mtime_ns": st.st_mtime_ns}

    def adapter_config(self) -> dict:
        """The PEFT adapter config diffusers writes into the header (r, lora_alpha, …), or {}."""
        raw = self.metadata.get(ADAPTER_METADATA)
        if not raw:
            return {}
        try:
            config = json.loads(raw)
        except json.JSONDecodeError:
            raise ConfigError(f"{self.setting}={self.path}: the header's {ADAPTER_METADATA} is not JSON") from None
        if not isinstance(config, dict):
            raise ConfigError(f"{self.setting}={self.path}: the header's {ADAPTER_METADATA} is not a JSON object")
        # A pipeline's save_lora_weights prefixes each entry with its component ("transformer.r").
        prefixed = {k.removeprefix("transformer."): v for k, v in config.items() if k.startswith("transformer.")}
        return prefixed or config

    def tensor(self, key: str, rows: tuple[int, int] | None = None) -> torch.Tensor:
        """The tensor (rows [begin, end) of dim 0 only, when given) as float32; NaN or ±inf in
        it (which would spread through the whole weight it changes) raises BadWeights."""
        t = self._read(key, rows)
        bad = non_finite(t)
        if bad:
            raise refuse(f"{self.setting}={self.path}", key, bad, t.numel())
        return t

    def _read(self, key: str, rows: tuple[int, int] | None = None) -> torch.Tensor:
        if self._tensors is not None:
            t = self._tensors[key]
            t = t if rows is None else t[rows[0] : rows[1]]
        else:
            # through the loader's own mapping (views of the file's pages, rows sliced by offset):
            # one reader of untrusted safetensors bytes for checkpoints and LoRAs, and a tensor
            # made by torch.frombuffer, which the fake-GPU harness's fake mode lets through
            mapped = self._map()
            t = mapped.view(mapped.infos[key], rows)
        self.bytes_read += t.numel() * t.element_size()
        return t.float()

    def _map(self) -> MappedFile:
        """The file's bytes, mapped on first read."""
        if self._mapped is None:
            self._mapped = MappedFile(self.path)
        return self._mapped

    def _number(self, key: str) -> float:
        if self._tensors is None:
            mapped = self._map()
            info = mapped.infos[key]
            value = mapped.number(info)
            if value is not None:
                self.bytes_read += info.end - info.start
                return value
        return float(self._read(key).reshape(()))

    def scalar(self, key: str) -> float:
        """An alpha, read while the run is checked (a bad one is a ConfigError, like a bad setting)."""
        if math.prod(self.shapes[key]) != 1:
            raise ConfigError(
                f"{self.setting}={self.path}: {key} should hold one number (an alpha), not shape {self.shapes[key]}"
            )
        value = self._number(key)
        if not math.isfinite(value):
            raise ConfigError(f"{self.setting}={self.path}: {key} is {value}, not a finite number")
        return value
