"""The JAX backend as the orchestrator sees it: one process drives every device of the mesh
(single controller), so its work is the whole padded sequence and every prompt, held as global
arrays with NamedShardings. The noise predictor is a compiled program per expert, the VAE
decode a compiled scan split by height; the text encoder stays a PyTorch module on the host
CPU and hands its embeddings over."""

from __future__ import annotations

import contextlib

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ...errors import ConfigError
from ...parallel.mesh import MeshSpec, check_jax_devices
from ..contract import Backend
from . import ops, placement
from .compile_cache import use as compile_cache_folder
from .predictor import JaxNoisePredictor, put
from .sequence_parallel import AXES, build_mesh
from .vae_codec import JaxVideoDecoder, height_split, video_encoder

_PLATFORMS = {"cpu": "cpu", "gpu": "gpu", "cuda": "gpu", "tpu": "tpu"}


def visible_devices(setting: str = "auto") -> list:
    """The devices `device=` selects: auto = JAX's default platform, or cpu / gpu (cuda) / tpu."""
    if setting == "auto":
        return jax.devices()
    if setting not in _PLATFORMS:
        raise ConfigError(f"device={setting} is not a JAX platform; with backend=jax use device=auto, cpu, gpu or tpu")
    try:
        return jax.devices(_PLATFORMS[setting])
    except RuntimeError:
        raise ConfigError(
            f"device={setting} but JAX sees no {_PLATFORMS[setting]} devices "
            f"(it has {jax.default_backend()}); use device=auto"
        ) from None


class JaxBackend(Backend):
    name = "jax"
    single_controller = True  # work = the whole padded sequence and every prompt, as global arrays
    compiles_ahead = True  # a warm-up phase compiles every program before the timed run
    text_device = "cpu"  # UMT5 stays a PyTorch module on the host
    # Host-side work (text encoding, handing arrays over, reading frames back) happens in every
    # controller process: each runs the same program on the global arrays.
    encodes_text = True

    def __init__(
        self,
        mesh: MeshSpec | None = None,
        device: str = "auto",
        fsdp: bool = False,
        kernel: str = "auto",
        compile_cache: str = "auto",
    ):
        mesh = mesh or MeshSpec()
        devices = visible_devices(device)
        check_jax_devices(mesh, len(devices))
        if jax.process_count() > 1 and mesh.world_size != len(devices):
            raise ConfigError(
                f"mesh={mesh.name} uses {mesh.world_size} of the {len(devices)} devices of this "
                f"{jax.process_count()}-host job; on several hosts the mesh must span every device"
            )
        self.mesh = build_mesh(mesh.dp, mesh.ring, mesh.ulysses, devices=devices[: mesh.world_size])
        self.ops = ops
        self.fsdp, self.kernel = fsdp, kernel
        self.device = f"{devices[0].platform} ×{mesh.world_size}" + (
            f" (of {len(devices)})" if len(devices) > mesh.world_size else ""
        )
        self._replicated = NamedSharding(self.mesh, P())
        self._encoders: dict = {}
        # before anything compiles: the programs of an earlier run with the same shapes load from disk
        self.compile_cache = compile_cache_folder(compile_cache)

    @property
    def rank(self) -> int:
        """This controller's index among the job's hosts (0 on one host)."""
        return jax.process_index()

    @property
    def writes_outputs(self) -> bool:
        return jax.process_index() == 0

    @property
    def leader(self) -> bool:
        """Process 0 of the hosts speaks for the job (the server's port, its queue)."""
        return jax.process_index() == 0

    @property
    def places_concurrently(self) -> bool:
        """Across hosts, putting an array onto the global mesh is a collective: every host must
        place the same arrays in the same order, so the loader places them one at a time."""
        return jax.process_count() == 1

    # ------------------------------------------------------------ arrays
    def weight_shard(self, memory: str) -> None:
        """One controller reads whole tensors: memory=sharded (= jax_fsdp) shards them as it
        places them (`place`), not while reading."""
        return None

    def place(self, tree, dtype: str, keep_fp32=None):
        """Stack the layer runs, cast, and put on the mesh: replicated, or FSDP-sharded over
        every mesh axis with memory=sharded (jax_fsdp=true)."""
        return placement.place(
            tree,
            self.mesh,
            dtype,
            keep_fp32,
            fsdp_axes=AXES if self.fsdp else None,
            fsdp_min_size=placement.FSDP_MIN_SIZE,
        )

    def to_device(self, array, dtype: str | None = None):
        """A host array, replicated over the mesh."""
        host = placement.host_array(array)
        if dtype is not None:
            host = host.astype(np.dtype(ops.dtype(dtype)))
        return put(host, self._replicated)

    def broadcast_from_main(self, tensor):
        # Every controller encoded the same prompts itself; nothing to send.
        return self.to_device(tensor)

    def to_host(self, x) -> np.ndarray:
        if not x.is_fully_addressable:
            from jax.experimental import multihost_utils

            x = multihost_utils.process_allgather(x, tiled=True)
        return ops.to_numpy(x)

    def same_on_every_rank(self, value):
        """Process 0's small picklable `value` on every host: its pickle's length, then its bytes,
        through JAX's process collectives (the server's next job, a claimed output folder)."""
        if jax.process_count() == 1:
            return value
        import pickle

        from jax.experimental import multihost_utils

        payload = np.frombuffer(pickle.dumps(value), np.uint8) if self.leader else np.zeros(0, np.uint8)
        size = int(multihost_utils.broadcast_one_to_all(np.array([payload.size], np.int64))[0])
        padded = np.zeros(size, np.uint8)
        padded[: payload.size] = payload
        return pickle.loads(np.asarray(multihost_utils.broadcast_one_to_all(padded)).tobytes())

    def any_rank(self, flag: bool) -> bool:
        """True in every controller when `flag` is true in any (the preemption vote:
        jobs/preemption.py); one process decides alone."""
        if jax.process_count() == 1:
            return flag
        from jax.experimental import multihost_utils

        return bool(np.max(multihost_utils.process_allgather(np.array([int(flag)], np.int32))))

    def synchronize(self) -> None:
        """Wait for the work queued so far (dispatch is asynchronous), so phases are timed
        by what they ran."""
        jax.block_until_ready(jax.live_arrays())

    def inference_mode(self):
        return contextlib.nullcontext()

    # ------------------------------------------------------------ generation parts
    def noise_predictor(self, task):
        return JaxNoisePredictor(task, self.mesh, fsdp=self.fsdp, kernel=self.kernel)

    def video_decoder(self, vae_params, vae_config):
        return JaxVideoDecoder(vae_params, vae_config, self.mesh, self.to_host)

    def vae_encode(self, params, video: np.ndarray, cfg):
        """The posterior mean, replicated over the mesh; the video enters split by height over
        this process's devices that divide its latent rows, and XLA's partitioner runs the
        encode on the bands (vae_codec.py), as it runs the decode. Each process encodes on its
        own devices (every controller holds the same video), then the mean is placed on all."""
        video = np.asarray(video, np.float32)
        devices = [d for d in self.mesh.devices.flat if d.process_index == jax.process_index()]
        split = height_split(video.shape[3] // cfg.spatial_stride, len(devices))
        bands = Mesh(np.asarray(devices[:split]), ("height",))
        key = (video.shape, split)
        if key not in self._encoders:
            self._encoders[key] = video_encoder(cfg, NamedSharding(bands, P()))
        # the encoder's weights whole on the split's devices (gathered if FSDP-sharded), for
        # this call: they are small, and kept they would sit beside the decoder's copy
        here = jax.device_put({k: params[k] for k in ("encoder", "quant_conv")}, NamedSharding(bands, P()))
        mean = self._encoders[key](here, put(video, NamedSharding(bands, P(None, None, None, "height", None))))
        return put(mean, self._replicated)
