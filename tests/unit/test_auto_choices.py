"""mesh=auto and backend=auto: the rule for 1–16 processes and the A14B / 5B / tiny head
counts, and the backend from faked launchers and hosts."""

import pytest
from harness.hosts import fake_host
from harness.settings import assert_refused, spec_for

from parallel_wan.launch import detect
from parallel_wan.launch.backend_choice import choose_backend, node_size
from parallel_wan.parallel.auto_mesh import auto_mesh
from parallel_wan.parallel.mesh import check_heads, mesh_spec

HEADS = {"a14b": 40, "5b": 24, "tiny": 8}


@pytest.mark.parametrize("model", sorted(HEADS))
@pytest.mark.parametrize("world", range(1, 17))
@pytest.mark.parametrize("guidance", [True, False])
def test_auto_mesh_rule(model, world, guidance):
    heads = HEADS[model]
    mesh = auto_mesh(world, heads, guidance, prompts=1)
    mesh_spec(mesh.to_dict(), world)
    check_heads(mesh, heads)
    assert mesh.world_size == world  # every process is used
    assert mesh.dp == (2 if guidance and world % 2 == 0 else 1)
    # Ulysses is the largest degree the heads allow; the ring takes the rest.
    cp = world // mesh.dp
    assert mesh.ulysses == max(u for u in range(1, cp + 1) if cp % u == 0 and heads % u == 0)
    assert mesh.ring == cp // mesh.ulysses
    if world == 1:
        assert mesh.name == "auto:single"


def test_auto_mesh_examples_and_the_node_limit():
    assert auto_mesh(8, 40, True, 1).name == "auto:dp2_ulysses4"
    assert auto_mesh(8, 24, False, 1).name == "auto:ulysses8"
    assert auto_mesh(16, 40, True, 1).name == "auto:dp2_ulysses8"
    # 2 nodes of 4: Ulysses stays inside a node, the ring crosses.
    assert auto_mesh(8, 40, False, 1, node_size=4).name == "auto:ulysses4_ring2"
    # a prompt batch that does not split evenly keeps dp = 1
    assert auto_mesh(4, 8, True, prompts=3).dp == 1 and auto_mesh(4, 8, True, prompts=2).dp == 2


def test_auto_mesh_from_the_settings():

    assert spec_for().mesh.name == "auto:single"
    assert_refused(["mesh=auto", "+mesh.dp=2"], ["mesh=auto", "name a mesh"])


@pytest.mark.parametrize(
    "env, host, expect",
    [
        ({"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "tpu", "torch"),
        ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_JOB_NODELIST": "n1"}, "none", "torch"),
        ({"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"}, "gpu", "jax"),
        ({"TPU_WORKER_HOSTNAMES": "a,b", "TPU_WORKER_ID": "1"}, "none", "jax"),
        ({}, "gpu", "torch"),
        ({}, "tpu", "jax"),
        ({}, "tpu_v5", "jax"),
        ({}, "none", "torch"),
        ({}, "other_pci", "torch"),
    ],
)
def test_backend_auto(tmp_path, env, host, expect):
    root = {
        "gpu": lambda: fake_host(tmp_path, "/dev/nvidia0"),
        "tpu": lambda: fake_host(tmp_path, "/dev/accel0"),
        "tpu_v5": lambda: fake_host(tmp_path, vendor="0x1ae0"),
        "other_pci": lambda: fake_host(tmp_path, vendor="0x8086"),
        "none": lambda: str(tmp_path),
    }[host]()
    name, why = choose_backend(detect(env), root=root)
    assert name == expect, why


def test_node_size_from_the_launcher():
    assert node_size({"LOCAL_WORLD_SIZE": "8"}) == 8
    assert node_size({"SLURM_NTASKS_PER_NODE": "4"}) == 4
    assert node_size({}) is None
