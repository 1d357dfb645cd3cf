"""The step phases by name (a child process imports its phase as module:function)."""

from .fast import mesh_step

ulysses8 = mesh_step("ulysses8")
cp8 = mesh_step("cp8")
dp2_cp4 = mesh_step("dp2_cp4")
