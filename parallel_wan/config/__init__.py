"""The run's typed settings: Hydra's composed config → a validated `RunSpec`.

schema.py holds the types (presets, RunSpec), resolve.py the validation, compose.py the one
composition of Hydra settings; the mesh (MeshSpec, `mesh_spec`, in parallel/mesh.py) and
ConfigError (errors.py) are re-exported here.
"""

from ..errors import ConfigError
from ..parallel.mesh import MeshSpec, mesh_spec
from .attention import attention_impls
from .resolve import backend_name, resolve
from .schema import (
    BACKENDS,
    DTYPES,
    MEMORY_MODES,
    SAMPLERS,
    SCHEDULES,
    ModelPreset,
    RunSpec,
    model_preset,
)

__all__ = [
    "BACKENDS",
    "DTYPES",
    "MEMORY_MODES",
    "SAMPLERS",
    "SCHEDULES",
    "ConfigError",
    "MeshSpec",
    "ModelPreset",
    "RunSpec",
    "attention_impls",
    "backend_name",
    "mesh_spec",
    "model_preset",
    "resolve",
]
