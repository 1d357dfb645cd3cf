"""The run's typed settings: Hydra's composed config → a validated `RunSpec`.

schema.py holds the types (presets, RunSpec), resolve.py the validation, compose.py the one
composition of Hydra settings; the mesh (MeshSpec, `mesh_spec`, in parallel/mesh.py) and
ConfigError (errors.py) are re-exported here.
"""

from ..errors import ConfigError
from ..parallel.mesh import MeshSpec, mesh_spec
from .resolve import backend_name, resolve
from .schema import (
    ATTENTION_IMPLS,
    BACKENDS,
    DTYPES,
    MEMORY_MODES,
    SAMPLERS,
    SCHEDULES,
    TASK_IN_CHANNELS,
    TASKS,
    ModelPreset,
    RunSpec,
    model_preset,
)

__all__ = [
    "ATTENTION_IMPLS",
    "BACKENDS",
    "DTYPES",
    "MEMORY_MODES",
    "SAMPLERS",
    "SCHEDULES",
    "TASK_IN_CHANNELS",
    "TASKS",
    "ConfigError",
    "MeshSpec",
    "ModelPreset",
    "RunSpec",
    "backend_name",
    "mesh_spec",
    "model_preset",
    "resolve",
]
