"""The fast weight loader: bit-equal to a plain safetensors read in both layouts and dtypes,
stacked block buffers shared by the per-layer views, dim-0 shards that read only their bytes,
and the converted-weights cache (hit = same bits and no copy; keyed by files and dtype;
broken entries ignored and rewritten)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import safetensors.torch
import torch
from safetensors import safe_open

from parallel_wan.builtin.tiny import build_tiny, write_checkpoint
from parallel_wan.config import ConfigError, resolve
from parallel_wan.models.transformer import keeps_fp32
from parallel_wan.weights import copy_pool, transformer_keymap, tree
from parallel_wan.weights.layout import describe_checkpoint
from parallel_wan.weights.loader import load_transformer
from parallel_wan.weights.safetensors_io import DTYPES, read_safetensors

EXPERT = "high_noise"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """The tiny T2V model (fp32 files) in both layouts, plus a diffusers copy whose expert
    shards are stored in bf16 — the dtype of the real checkpoints, read by view, not cast."""
    model = build_tiny("t2v", seed=5)
    root = tmp_path_factory.mktemp("ckpt")
    out = {layout: write_checkpoint(model, root / layout, layout) for layout in ("diffusers", "official")}
    bf16 = write_checkpoint(model, root / "bf16", "diffusers")
    for folder in ("transformer", "transformer_2"):
        for file in (bf16 / folder).glob("*.safetensors"):
            state = safetensors.torch.load_file(file)
            safetensors.torch.save_file({k: v.to(torch.bfloat16) for k, v in state.items()}, file)
    out["bf16"] = bf16
    return {name: describe_checkpoint(path) for name, path in out.items()}


def plain_read(ckpt, expert, dtype, keep):
    """The oracle: safetensors' own reader, one tensor at a time, then `.to` the wanted dtype."""
    rename = transformer_keymap.official_to_diffusers_name if ckpt.layout == "official" else (lambda n: n)
    out = {}
    for file in sorted(ckpt.experts[expert].glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for stored in f.keys():
                name = rename(stored)
                out[name] = f.get_tensor(stored).to(torch.float32 if keep and keep(name) else DTYPES[dtype])
    return out


def assert_bitwise(a: dict, b: dict):
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert a[name].shape == b[name].shape, name
        assert torch.equal(a[name], b[name]), name


@pytest.fixture
def copied_bytes(monkeypatch):
    """Counts the bytes every copy reads from its source (the only reads of weight data)."""
    seen = []
    real = copy_pool.copy_into

    def counting(destination, source):
        seen.append(source.numel() * source.element_size())
        real(destination, source)

    monkeypatch.setattr(copy_pool, "copy_into", counting)
    return seen


# ------------------------------------------------------------------------------ plain loads
@pytest.mark.parametrize("source", ["diffusers", "official", "bf16"])
@pytest.mark.parametrize("dtype,keep", [("bfloat16", keeps_fp32), ("bfloat16", None), ("float32", None)])
def test_loads_bit_equal_to_a_plain_read(checkpoints, source, dtype, keep):
    ckpt = checkpoints[source]
    for expert in ckpt.experts:
        ours = tree.flatten(load_transformer(ckpt, expert, dtype, keep))
        assert_bitwise(ours, plain_read(ckpt, expert, dtype, keep))
        if keep is not None:
            kept = {n for n, t in ours.items() if t.dtype == torch.float32}
            assert kept == {n for n in ours if keeps_fp32(n)} and kept  # norms, embeddings, modulation


def test_blocks_are_views_of_one_stacked_buffer_per_name(checkpoints, tmp_path):
    ckpt, expert = checkpoints["official"], EXPERT  # its layer 0 spans both shard files, layer 1 one
    params = load_transformer(ckpt, expert, "bfloat16", keeps_fp32)
    layers = [tree.flatten(layer) for layer in params["blocks"]]
    assert len(layers) == 2
    # every layer lists its tensors in one order (JAX's placement stacks them leaf by leaf),
    # also when a layer is split over two files
    load_transformer(ckpt, expert, "bfloat16", keeps_fp32, cache_dir=tmp_path)
    hit = load_transformer(ckpt, expert, "bfloat16", keeps_fp32, cache_dir=tmp_path)
    for tree_ in (params, hit):
        orders = [list(tree.flatten(layer)) for layer in tree_["blocks"]]
        assert orders[0] == orders[1]
    for name, first in layers[0].items():
        second = layers[1][name]
        assert first.untyped_storage().data_ptr() == second.untyped_storage().data_ptr(), name
        assert second.data_ptr() - first.data_ptr() == first.numel() * first.element_size(), name


def test_read_safetensors_matches_a_plain_read(checkpoints):
    ckpt = checkpoints["diffusers"]
    ours = read_safetensors(ckpt.vae_path, dtype="bfloat16", keep_fp32=lambda n: n.startswith("decoder"))
    with safe_open(str(next(ckpt.vae_path.glob("*.safetensors"))), framework="pt") as f:
        plain = {k: f.get_tensor(k).to(torch.float32 if k.startswith("decoder") else torch.bfloat16) for k in f.keys()}
    assert_bitwise(ours, plain)


# ------------------------------------------------------------------------------ shards
@pytest.mark.parametrize("count", [1, 3, 130])  # 130 > 128 rows: the last shards are empty
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_shards_are_torch_chunk_pieces_and_read_only_their_bytes(checkpoints, copied_bytes, count):
    ckpt = checkpoints["bf16"]
    full = plain_read(ckpt, EXPERT, "bfloat16", keeps_fp32)
    stored = plain_read(ckpt, EXPERT, "bfloat16", None)  # the file's dtype everywhere: bytes as stored
    pieces = []
    for index in range(count):
        copied_bytes.clear()
        piece = tree.flatten(load_transformer(ckpt, EXPERT, "bfloat16", keeps_fp32, shard=(index, count)))
        assert piece.keys() == full.keys()
        expected_bytes = 0
        for name, tensor in piece.items():
            chunks = torch.chunk(full[name], count, dim=0)
            want = chunks[index] if index < len(chunks) else full[name][:0]
            assert tensor.dtype == want.dtype and torch.equal(tensor, want), name
            expected_bytes += want.numel() * stored[name].element_size()
        assert sum(copied_bytes) == expected_bytes
        pieces.append(piece)
    for name, tensor in full.items():
        assert torch.equal(torch.cat([p[name] for p in pieces]), tensor), name


def test_bad_shard_is_refused_before_reading(checkpoints, copied_bytes):
    with pytest.raises(ValueError, match=r"shard=\(3, 3\)"):
        load_transformer(checkpoints["bf16"], EXPERT, "bfloat16", shard=(3, 3))
    assert copied_bytes == []


# ------------------------------------------------------------------------------ cache
def cache_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors"))


def test_cache_hit_is_bit_equal_and_copies_nothing(checkpoints, tmp_path, monkeypatch):
    ckpt = checkpoints["official"]
    for dtype in ("bfloat16", "float32"):
        fresh = tree.flatten(load_transformer(ckpt, EXPERT, dtype, keeps_fp32, cache_dir=tmp_path))
        assert_bitwise(fresh, plain_read(ckpt, EXPERT, dtype, keeps_fp32))
    files = cache_files(tmp_path)
    assert len(files) == 2  # one entry per dtype
    # the entry is a valid safetensors file, its stacked buffers one tensor each
    with safe_open(str(files[0]), framework="pt") as f:
        assert (
            "blocks.*.attn1.to_q.weight" in f.keys() and f.get_slice("blocks.*.attn1.to_q.weight").get_shape()[0] == 2
        )

    def no_copy(destination, source):
        raise AssertionError("a cache hit must not copy or cast")

    monkeypatch.setattr(copy_pool, "copy_into", no_copy)
    for dtype in ("bfloat16", "float32"):
        hit = load_transformer(ckpt, EXPERT, dtype, keeps_fp32, cache_dir=tmp_path)
        assert_bitwise(tree.flatten(hit), plain_read(ckpt, EXPERT, dtype, keeps_fp32))
        a, b = (tree.flatten(layer)["ffn.net.0.proj.weight"] for layer in hit["blocks"])
        assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()  # still one stacked buffer
    assert cache_files(tmp_path) == files


def test_sharded_load_reads_its_rows_from_the_cache(checkpoints, tmp_path, copied_bytes):
    ckpt = checkpoints["diffusers"]
    full = tree.flatten(load_transformer(ckpt, EXPERT, "bfloat16", keeps_fp32, cache_dir=tmp_path))
    copied_bytes.clear()
    piece = tree.flatten(load_transformer(ckpt, EXPERT, "bfloat16", keeps_fp32, shard=(1, 3), cache_dir=tmp_path))
    assert_bitwise(piece, tree.flatten(load_transformer(ckpt, EXPERT, "bfloat16", keeps_fp32, shard=(1, 3))))
    assert sum(copied_bytes[: len(piece)]) == sum(t.numel() * t.element_size() for t in piece.values())
    assert sum(t.numel() for t in piece.values()) < sum(t.numel() for t in full.values()) / 2


def test_cache_key_follows_files_and_dtype(checkpoints, tmp_path):
    ckpt = checkpoints["diffusers"]
    load_transformer(ckpt, EXPERT, "bfloat16", keeps_fp32, cache_dir=tmp_path)
    load_transformer(ckpt, EXPERT, "bfloat16", keeps_fp32, cache_dir=tmp_path)
    assert len(cache_files(tmp_path)) == 1  # same files, same dtype: the same entry
    load_transformer(ckpt, EXPERT, "bfloat16", None, cache_dir=tmp_path)
    assert len(cache_files(tmp_path)) == 2  # other fp32 exceptions: another entry
    load_transformer(ckpt, EXPERT, "float32", keeps_fp32, cache_dir=tmp_path)
    assert len(cache_files(tmp_path)) == 3
    shard = next(ckpt.experts[EXPERT].glob("*.safetensors"))
    stat = shard.stat()
    try:
        os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # "the file changed"
        load_transformer(ckpt, EXPERT, "bfloat16", keeps_fp32, cache_dir=tmp_path)
        assert len(cache_files(tmp_path)) == 4
    finally:
        os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_broken_cache_entries_are_ignored_and_rewritten(checkpoints, tmp_path, caplog):
    ckpt = checkpoints["bf16"]
    want = plain_read(ckpt, EXPERT, "bfloat16", keeps_fp32)
    load_transformer(ckpt, EXPERT, "bfloat16", keeps_fp32, cache_dir=tmp_path)
    (entry,) = cache_files(tmp_path)
    good = entry.read_bytes()
    leftover = entry.with_name(entry.name + ".4242.tmp")  # a crashed writer's temp file
    leftover.write_bytes(good[: len(good) // 2])
    for broken in (
        good[: len(good) - 100],
        good[:5],
        b"\0" * 64,
        good[:8] + good[8:20].replace(b"{", b"[") + good[20:],
    ):
        entry.write_bytes(broken)
        with caplog.at_level(logging.WARNING, logger="parallel_wan"):
            caplog.clear()
            got = tree.flatten(load_transformer(ckpt, EXPERT, "bfloat16", keeps_fp32, cache_dir=tmp_path))
        assert_bitwise(got, want)
        assert any("unusable" in r.getMessage() for r in caplog.records)
        assert entry.read_bytes() == good  # rewritten whole
    assert not leftover.exists()
    assert cache_files(tmp_path) == [entry]


def test_weights_cache_dir_setting(tmp_path):
    from parallel_wan.config.compose import compose_settings

    cfg = compose_settings([]) | {"output_dir": str(tmp_path)}
    assert resolve(cfg).weights.cache_dir is None
    assert resolve(cfg | {"weights_cache_dir": str(tmp_path / "new" / "cache")}).weights.cache_dir == str(
        tmp_path / "new" / "cache"
    )
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match=r"weights_cache_dir=.*is a file"):
        resolve(cfg | {"weights_cache_dir": str(tmp_path / "file" / "cache")})


def mapped_file(tensor: torch.Tensor) -> str | None:
    """The file whose mapping holds the tensor's memory (from /proc/self/maps), if any."""
    address = tensor.data_ptr()
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        low, high = (int(x, 16) for x in fields[0].split("-"))
        if low <= address < high:
            return fields[5] if len(fields) == 6 and fields[5].startswith("/") else None
    return None


def test_load_components_fills_and_then_hits_the_cache(checkpoints, tmp_path):
    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.config.compose import compose_settings
    from parallel_wan.pipeline import load_components, preflight

    ckpt = checkpoints["official"]
    cfg = compose_settings(["device=cpu"])
    spec = resolve(
        cfg
        | {
            "output_dir": str(tmp_path / "out"),
            "checkpoint_dir": str(ckpt.root),
            "weights_cache_dir": str(tmp_path / "cache"),
        }
    )
    backend = start_torch_backend("cpu")
    first = load_components(spec, preflight(spec), backend)
    assert first.text_encoder is not None and first.vae_params
    assert len(cache_files(tmp_path / "cache")) == 2  # one entry per expert
    entries = {str(p) for p in cache_files(tmp_path / "cache")}
    second = load_components(spec, preflight(spec), backend)
    for name, (config, params) in first.experts.items():
        assert second.experts[name][0] == config
        assert mapped_file(params["blocks"][0]["ffn"]["net"][0]["proj"]["weight"]) is None  # converted copies
        assert mapped_file(second.experts[name][1]["blocks"][0]["ffn"]["net"][0]["proj"]["weight"]) in entries
        assert_bitwise(tree.flatten(second.experts[name][1]), tree.flatten(params))
        assert_bitwise(tree.flatten(params), plain_read(ckpt, name, "bfloat16", keeps_fp32))
    assert {str(p) for p in cache_files(tmp_path / "cache")} == entries
