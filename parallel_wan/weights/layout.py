"""What a checkpoint folder holds, in either layout, checked before anything heavy is read.

diffusers layout (`Wan-AI/Wan2.2-*-Diffusers`): model_index.json, transformer/ (high-noise
expert, or the only one), transformer_2/ (low-noise), vae/, text_encoder/, tokenizer/, scheduler/.
official layout (`Wan-AI/Wan2.2-*`): high_noise_model/ + low_noise_model/ (or, for TI2V-5B,
the one expert's config.json and shards at the root), Wan2.1_VAE.pth or Wan2.2_VAE.pth,
models_t5_umt5-xxl-enc-bf16.pth and the tokenizer in google/umt5-xxl/.

`describe_checkpoint` reads only JSON, safetensors headers and the pickle directories of the
`.pth` files (memory-mapped, no tensor data), so `run.py` can call it first and stop with one
sentence when a folder is incomplete or its weights disagree with its config.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path

from parallel_wan.models.experts import DIFFUSERS_FOLDERS, HIGH, LOW, OFFICIAL_FOLDERS as OFFICIAL_EXPERTS, SINGLE
from parallel_wan.models.transformer_config import TransformerConfig, is_official_animate
from parallel_wan.models.transformer_shapes import param_shapes
from parallel_wan.models.vae_config import VaeConfig
from parallel_wan.models.variants import VARIANTS
from parallel_wan.weights import transformer_keymap
from parallel_wan.weights.safetensors_header import tensor_index
from parallel_wan.weights.trust import check_links

OFFICIAL_VAES = {"wan2.1": "Wan2.1_VAE.pth", "wan2.2": "Wan2.2_VAE.pth"}
OFFICIAL_T5 = "models_t5_umt5-xxl-enc-bf16.pth"
OFFICIAL_TOKENIZER = "google/umt5-xxl"
# Animate-14B's image encoder: open-clip's XLM-RoBERTa-large + ViT-H/14, of which the vision tower is read
OFFICIAL_CLIP = "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth"


class CheckpointError(ValueError):
    """A checkpoint folder is missing a part or its parts disagree; the message says which."""


@dataclass(frozen=True)
class Checkpoint:
    root: Path
    layout: str  # "diffusers" | "official"
    experts: dict[str, Path]  # {HIGH: dir, LOW: dir} or {SINGLE: dir} (models/experts.py)
    transformers: dict[str, TransformerConfig]  # per expert
    vae_path: Path  # vae/ folder (diffusers) or the .pth file (official)
    vae_kind: str  # "wan2.1" | "wan2.2"
    vae_config: VaeConfig
    text_encoder_path: Path  # text_encoder/ folder (diffusers) or the .pth file (official)
    text_encoder_format: str  # "diffusers" (UMT5EncoderModel folder) | "official" (T5Encoder .pth)
    tokenizer_path: Path
    scheduler_config: dict | None  # scheduler/scheduler_config.json; the official layout has none
    pipeline: dict | None = None  # model_index.json (boundary_ratio, expand_timesteps, …)
    # expert → weights.expert_file.ExpertFile replacing that expert's weights (weights_high= …)
    expert_files: dict = dataclasses.field(default_factory=dict)
    # Animate: the CLIP vision tower (transformers CLIPVisionModel folder) and its processor's folder
    image_encoder_path: Path | None = None
    image_processor_path: Path | None = None
    # S2V: the wav2vec2 folder (transformers Wav2Vec2ForCTC/Model: config.json, preprocessor_config.json, weights)
    audio_encoder_path: Path | None = None

    @property
    def boundary_ratio(self) -> float | None:
        return (self.pipeline or {}).get("boundary_ratio")


def describe_checkpoint(checkpoint_dir: str | Path) -> Checkpoint:
    root = Path(checkpoint_dir).expanduser()
    where = f"checkpoint_dir={root}"
    if not root.is_dir():
        raise CheckpointError(f"{where}: no such folder; set checkpoint_dir to a downloaded Wan 2.2 checkpoint")
    try:
        check_links(root)  # before any file of it is opened
    except ValueError as e:
        raise CheckpointError(f"{where}: {e}") from None
    if (root / "model_index.json").is_file():
        checkpoint = _describe_diffusers(root, where)
    elif any((root / d).is_dir() for d in OFFICIAL_EXPERTS.values()) or _is_official_config(root / "config.json"):
        checkpoint = _describe_official(root, where)
    else:
        hint = ""
        if (root / "config.json").is_file() and (root.parent / "model_index.json").is_file():
            hint = f"; this looks like one component of a diffusers checkpoint, use checkpoint_dir={root.parent}"
        elif (root / "transformer").is_dir():
            hint = "; transformer/ is there, so a diffusers download lost its model_index.json (re-download it)"
        raise CheckpointError(
            f"{where}: neither model_index.json (diffusers layout) nor high_noise_model/ (official layout) "
            f"nor an official config.json (TI2V-5B) found{hint}"
        )
    _check_consistency(checkpoint, where)
    return checkpoint


# ------------------------------------------------------------------------------ diffusers
def _describe_diffusers(root: Path, where: str) -> Checkpoint:
    index = _read_json(root / "model_index.json", where)

    def listed(component: str) -> bool:
        entry = index.get(component)
        return isinstance(entry, (list, tuple)) and len(entry) == 2 and entry[0] is not None

    def folder(component: str, expected: str) -> Path:
        path = root / component
        if not listed(component):
            raise CheckpointError(f"{where}: model_index.json does not list {component}; expected {expected}")
        if not path.is_dir():
            raise CheckpointError(
                f"{where}: model_index.json lists {component} but {component}/ is missing; expected {expected}"
            )
        return path

    high = folder(DIFFUSERS_FOLDERS[HIGH], "the (high-noise) transformer expert")
    experts = {SINGLE: high}
    if listed(DIFFUSERS_FOLDERS[LOW]):
        experts = {HIGH: high, LOW: folder(DIFFUSERS_FOLDERS[LOW], "the low-noise transformer expert")}
    configs = {}
    for name, path in experts.items():
        cfg = _read_json(path / "config.json", where)
        configs[name] = _config_or_error(TransformerConfig.from_diffusers, cfg, where, f"{path.name}/")
        _check_transformer_shapes(path, f"{path.name}/", configs[name], where, official=False)

    vae_dir = folder("vae", "the AutoencoderKLWan config.json and safetensors")
    vae = _config_or_error(VaeConfig.from_diffusers, _read_json(vae_dir / "config.json", where), where, "vae/")
    _check_vae_shapes(vae_dir, vae, where)

    text_dir = folder("text_encoder", "the UMT5EncoderModel config.json and safetensors")
    _read_json(text_dir / "config.json", where)
    _weights_or_error(text_dir, where)
    tokenizer_dir = folder("tokenizer", "the UMT5 tokenizer files")
    _check_tokenizer(tokenizer_dir, "tokenizer/", where)
    scheduler = None
    if listed("scheduler"):
        scheduler = _read_json(folder("scheduler", "scheduler_config.json") / "scheduler_config.json", where)
    image_encoder = image_processor = None
    if any(cfg.image_dim is not None for cfg in configs.values()):  # Animate reads the image through CLIP
        image_encoder = folder("image_encoder", "the CLIPVisionModel config.json and safetensors")
        _read_json(image_encoder / "config.json", where)
        _weights_or_error(image_encoder, where)
        image_processor = folder("image_processor", "the CLIPImageProcessor preprocessor_config.json")
        _read_json(image_processor / "preprocessor_config.json", where)
    return Checkpoint(
        root=root,
        layout="diffusers",
        experts=experts,
        transformers=configs,
        vae_path=vae_dir,
        vae_kind=_vae_kind(vae),
        vae_config=vae,
        text_encoder_path=text_dir,
        text_encoder_format="diffusers",
        tokenizer_path=tokenizer_dir,
        scheduler_config=scheduler,
        pipeline={k: v for k, v in index.items() if not isinstance(v, list)},
        image_encoder_path=image_encoder,
        image_processor_path=image_processor,
    )


# ------------------------------------------------------------------------------ official
def _describe_official(root: Path, where: str) -> Checkpoint:
    present = {name: root / d for name, d in OFFICIAL_EXPERTS.items() if (root / d).is_dir()}
    if len(present) == 1:
        have = next(d for d in OFFICIAL_EXPERTS.values() if (root / d).is_dir())
        lack = next(d for d in OFFICIAL_EXPERTS.values() if not (root / d).is_dir())
        raise CheckpointError(f"{where}: {have}/ found but {lack}/ is missing; the A14B models need both experts")
    experts = present or {SINGLE: root}
    configs = {}
    for name, path in experts.items():
        part = f"{path.name}/" if present else ""
        cfg = _read_json(path / "config.json", where)
        shapes = None
        if is_official_animate(cfg):  # its motion and face dimensions are the tensors', not the file's
            try:
                shapes = {
                    n: i.shape for n, i in transformer_keymap.official_sources(_weights_or_error(path, where)).items()
                }
            except KeyError as e:
                raise CheckpointError(f"{where}: {part or 'the root folder'} {e.args[0]}") from None
        configs[name] = _config_or_error(lambda c: TransformerConfig.from_official(c, shapes), cfg, where, part)
        _check_transformer_shapes(path, part, configs[name], where, official=True)

    vaes = {kind: root / file for kind, file in OFFICIAL_VAES.items() if (root / file).is_file()}
    if not vaes:
        raise CheckpointError(f"{where}: no VAE found; expected {' or '.join(OFFICIAL_VAES.values())}")
    # Both files may sit side by side; the transformer's latent channels decide (48 → Wan 2.2).
    want = "wan2.2" if next(iter(configs.values())).out_channels == 48 else "wan2.1"
    vae_kind = want if want in vaes else next(iter(vaes))
    vae = _official_vae_config(vaes[vae_kind], vae_kind, where)

    t5 = root / OFFICIAL_T5
    if not t5.is_file():
        raise CheckpointError(f"{where}: {OFFICIAL_T5} is missing; expected the official UMT5-XXL encoder weights")
    tokenizer = root / OFFICIAL_TOKENIZER
    if not tokenizer.is_dir():
        raise CheckpointError(f"{where}: {OFFICIAL_TOKENIZER}/ is missing; expected the umt5-xxl tokenizer files")
    _check_tokenizer(tokenizer, f"{OFFICIAL_TOKENIZER}/", where)
    audio = _official_audio_encoder(root, next(iter(configs.values())), where)
    clip = None
    if any(cfg.animate is not None for cfg in configs.values()):  # Animate reads the image through CLIP
        clip = root / OFFICIAL_CLIP
        if not clip.is_file():
            raise CheckpointError(
                f"{where}: {OFFICIAL_CLIP} is missing; Animate-14B reads the character image through that CLIP"
            )
        _pth_shapes(clip, where)  # a pickle we can read the directory of, before anything loads
    return Checkpoint(
        root=root,
        layout="official",
        experts=experts,
        transformers=configs,
        vae_path=vaes[vae_kind],
        vae_kind=vae_kind,
        vae_config=vae,
        text_encoder_path=t5,
        text_encoder_format="official",
        tokenizer_path=tokenizer,
        scheduler_config=None,
        audio_encoder_path=audio,
        image_encoder_path=clip,  # the processor is CLIP's own (image/clip.py)
    )


from ..models.s2v_config import WAV2VEC_LAYERS  # noqa: E402 (beside the one function that needs it)

OFFICIAL_WAV2VEC = "wav2vec2-large-xlsr-53-english"  # S2V-14B's audio encoder folder (its config's `wav2vec`)


def _official_audio_encoder(root: Path, cfg: TransformerConfig, where: str) -> Path | None:
    """S2V's wav2vec2 folder, its width checked against the transformer's audio_dim; None for
    the other variants."""
    if cfg.s2v is None:
        return None
    folder = root / OFFICIAL_WAV2VEC
    for file in ("config.json", "preprocessor_config.json"):
        if not (folder / file).is_file():
            raise CheckpointError(
                f"{where}: {OFFICIAL_WAV2VEC}/{file} is missing; S2V-14B needs its wav2vec2 audio encoder folder"
            )
    if not any(folder.glob("*.safetensors")) and not (folder / "pytorch_model.bin").is_file():
        raise CheckpointError(f"{where}: {OFFICIAL_WAV2VEC}/ has no weights (model.safetensors or pytorch_model.bin)")
    audio_cfg = _read_json(folder / "config.json", where)
    width, layers = audio_cfg.get("hidden_size"), audio_cfg.get("num_hidden_layers")
    if width != cfg.s2v.audio_dim or layers is None or layers + 1 != WAV2VEC_LAYERS:
        raise CheckpointError(
            f"{where}: {OFFICIAL_WAV2VEC}/config.json has hidden_size={width}, num_hidden_layers={layers}; the "
            f"transformer weighs 25 hidden states of width audio_dim={cfg.s2v.audio_dim} (24 layers)"
        )
    return folder


def _check_tokenizer(folder: Path, part: str, where: str) -> None:
    files = ("tokenizer.json", "spiece.model")
    if not any((folder / f).is_file() for f in files):
        raise CheckpointError(
            f"{where}: {part} has neither {' nor '.join(files)}; the tokenizer download is incomplete"
        )


def _is_official_config(path: Path) -> bool:
    if not path.is_file():
        return False
    try:
        cfg = json.loads(path.read_text())
    except ValueError:
        return False
    return isinstance(cfg, dict) and "num_heads" in cfg and "in_dim" in cfg


def _official_vae_config(path: Path, kind: str, where: str) -> VaeConfig:
    """The preset named by the file, with the widths its tensors actually have.

    The official .pth carries no config; the real files match the presets, and reading the
    widths from the shapes also describes smaller VAEs written in this layout (the tiny model).
    """
    shapes = _pth_shapes(path, where)
    preset = VaeConfig.wan2_2() if kind == "wan2.2" else VaeConfig.wan2_1()
    try:
        base_dim = shapes["encoder.conv1.weight"][0]
        z_dim = shapes["conv2.weight"][0]
        decoder_dim = shapes["decoder.conv1.weight"][0] // preset.dim_mult[-1]
    except KeyError as e:
        raise CheckpointError(
            f"{where}: {path.name} has no tensor {e.args[0]}; expected a Wan VAE state dict"
        ) from None
    if z_dim != preset.z_dim:
        raise CheckpointError(
            f"{where}: {path.name} has z_dim {z_dim} but a {kind} VAE has {preset.z_dim}; "
            "the file is misnamed or not a Wan VAE"
        )
    return dataclasses.replace(
        preset, base_dim=base_dim, decoder_base_dim=None if decoder_dim == base_dim else decoder_dim
    )


# ------------------------------------------------------------------------------ shape checks
def _check_transformer_shapes(folder: Path, part: str, cfg: TransformerConfig, where: str, official: bool) -> None:
    """part: the folder as the user sees it ("transformer/", "high_noise_model/", "" for the root)."""
    infos = _weights_or_error(folder, where)
    config_file = f"{part}config.json"
    part = part or "the root folder"
    try:
        mapped = transformer_keymap.official_sources(infos) if official else infos
    except KeyError as e:
        raise CheckpointError(f"{where}: {part} {e.args[0]}") from None
    stored: dict[str, tuple[int, ...]] = {name: info.shape for name, info in mapped.items()}
    expected = param_shapes(cfg)
    summary = (
        f"in_channels={cfg.in_channels}, out_channels={cfg.out_channels}, dim={cfg.dim}, "
        f"ffn_dim={cfg.ffn_dim}, text_dim={cfg.text_dim}, freq_dim={cfg.freq_dim}, num_layers={cfg.num_layers}"
    )
    layers = {int(m.group(1)) for n in stored if (m := re.match(r"blocks\.(\d+)\.", n))}
    if len(layers) != cfg.num_layers:
        raise CheckpointError(
            f"{where}: {part} holds {len(layers)} transformer blocks but {config_file} says "
            f"num_layers={cfg.num_layers}; "
            "the weights and config.json disagree (re-download that folder)"
        )
    wrong = [(n, stored[n], s) for n, s in expected.items() if n in stored and tuple(stored[n]) != s]
    if wrong:
        detail = "; ".join(
            f"{_official(n, official)} has shape {tuple(have)}, config implies {want}" for n, have, want in wrong[:3]
        )
        raise CheckpointError(
            f"{where}: {part} tensors disagree with {config_file} ({summary}): {detail}"
            + (f" (and {len(wrong) - 3} more)" if len(wrong) > 3 else "")
        )
    missing = [n for n in expected if n not in stored]
    if missing:
        raise CheckpointError(
            f"{where}: {part} lacks {len(missing)} tensors its {config_file} implies, e.g. "
            f"{', '.join(_official(n, official) for n in missing[:3])}; the shards are incomplete (re-download them)"
        )
    # Parameterless norms never reach a file; anything else extra is a different model.
    extra = [n for n in stored if n not in expected]
    image_branch = [n for n in extra if "image_embedder" in n or ".add_k_proj" in n]
    if image_branch and cfg.animate is None:
        names = ", ".join(_official(n, official) for n in image_branch[:2])
        raise CheckpointError(
            f"{where}: {part} has Wan 2.1's image branch ({names}) "
            "without Animate's motion and face encoders: that is Wan 2.1 I2V, which parallel_wan does not run; "
            "use a Wan 2.2 checkpoint (T2V-A14B, I2V-A14B, TI2V-5B or Animate-14B)"
        )
    if extra:
        raise CheckpointError(
            f"{where}: {part} has tensors a Wan 2.2 transformer with this config lacks, e.g. "
            f"{', '.join(_official(n, official) for n in extra[:3])}; check that this is a Wan 2.2 checkpoint"
        )


def _official(name: str, official: bool) -> str:
    return transformer_keymap.diffusers_to_official_name(name) if official else name


def _check_vae_shapes(folder: Path, cfg: VaeConfig, where: str) -> None:
    infos = _weights_or_error(folder, where)
    from ..models.vae_shapes import param_shapes  # AutoencoderKLWan's table

    table = param_shapes(cfg)
    expected = {
        name: table[name] for name in ("encoder.conv_in.weight", "post_quant_conv.weight", "decoder.conv_in.weight")
    }
    for name, want in expected.items():
        have = infos.get(name)
        if have is None:
            raise CheckpointError(f"{where}: vae/ has no tensor {name}; expected an AutoencoderKLWan checkpoint")
        if tuple(have.shape) != want:
            raise CheckpointError(
                f"{where}: vae/ tensor {name} has shape {tuple(have.shape)} but vae/config.json "
                f"(base_dim={cfg.base_dim}, decoder_base_dim={cfg.decoder_base_dim}, z_dim={cfg.z_dim}, "
                f"in_channels={cfg.in_channels}) implies {want}; the weights and config.json disagree"
            )


def _check_consistency(ckpt: Checkpoint, where: str) -> None:
    """Parts that must fit together: expert channels, the VAE's latents, the text width."""
    configs = list(ckpt.transformers.items())
    first_name, first = configs[0]
    for name, cfg in configs[1:]:
        for field in ("in_channels", "out_channels", "text_dim", "num_attention_heads", "attention_head_dim"):
            if getattr(cfg, field) != getattr(first, field):
                raise CheckpointError(
                    f"{where}: the {first_name} and {name} experts disagree on {field} "
                    f"({getattr(first, field)} vs {getattr(cfg, field)}); both must come from one model"
                )
    z = ckpt.vae_config.z_dim
    if first.out_channels != z:
        raise CheckpointError(
            f"{where}: the transformer predicts {first.out_channels} latent channels but the {ckpt.vae_kind} VAE "
            f"has z_dim {z}; T2V/I2V-A14B use Wan2.1's VAE (16), TI2V-5B Wan2.2's (48)"
        )
    if first.in_channels not in {v.in_channels(ckpt.vae_config) for v in VARIANTS}:
        raise CheckpointError(
            f"{where}: transformer in_channels {first.in_channels} fits neither text-to-video ({z}) nor "
            f"image-to-video ({2 * z + 4} = noise + mask + image latent) with a z_dim {z} VAE"
        )
    if ckpt.image_encoder_path is not None:
        official = ckpt.image_encoder_path.is_file()  # the official layout's open-clip file
        if official:
            width = _pth_shapes(ckpt.image_encoder_path, where).get("visual.cls_embedding", (0,))[-1]
        else:
            width = _read_json(ckpt.image_encoder_path / "config.json", where).get("hidden_size")
        if width != first.image_dim:
            raise CheckpointError(
                f"{where}: the image encoder's features are {width} wide but the transformer's image_dim is "
                f"{first.image_dim}; {OFFICIAL_CLIP if official else 'image_encoder/'} belongs to a different model"
            )
    text_width = _text_encoder_width(ckpt, where)
    if text_width is not None and text_width != first.text_dim:
        raise CheckpointError(
            f"{where}: the text encoder emits {text_width}-wide embeddings but the transformer's "
            f"text_dim is {first.text_dim}; the text encoder belongs to a different model"
        )


def _text_encoder_width(ckpt: Checkpoint, where: str) -> int | None:
    if ckpt.text_encoder_format == "diffusers":
        return _read_json(ckpt.text_encoder_path / "config.json", where).get("d_model")
    shape = _pth_shapes(ckpt.text_encoder_path, where).get("token_embedding.weight")
    if shape is None:
        raise CheckpointError(
            f"{where}: {OFFICIAL_T5} has no token_embedding.weight; expected the official T5 encoder state dict"
        )
    return shape[1]


# ------------------------------------------------------------------------------ small readers
def _read_json(path: Path, where: str) -> dict:
    if not path.is_file():
        raise CheckpointError(f"{where}: {path} is missing")
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise CheckpointError(f"{where}: {path} is not valid JSON ({e})") from None


def _weights_or_error(folder: Path, where: str):
    try:
        return tensor_index(folder)
    except (OSError, ValueError, KeyError) as e:
        raise CheckpointError(f"{where}: {e}") from None


def _pth_shapes(path: Path, where: str) -> dict[str, tuple[int, ...]]:
    try:
        from parallel_wan.weights.safetensors_io import load_pth_mapped  # torch: only for .pth files

        return {k: tuple(v.shape) for k, v in load_pth_mapped(path).items()}
    except ValueError as e:
        raise CheckpointError(f"{where}: {e}") from None


def _config_or_error(parse, cfg: dict, where: str, part: str):
    try:
        return parse(cfg)
    except (TypeError, KeyError, ValueError) as e:
        raise CheckpointError(f"{where}: {part}config.json: {e}") from None


def _vae_kind(cfg: VaeConfig) -> str:
    return "wan2.2" if cfg.z_dim == 48 or cfg.is_residual else "wan2.1"
