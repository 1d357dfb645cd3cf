"""The built-in tiny random Wan 2.2 model: every component, made in memory from a seed.

`python -m parallel_wan.run` with no checkpoint builds one, writes it as a checkpoint folder
and loads it back through the ordinary loader, so the default run exercises the real path
without downloading anything. Tests use the same model.

Shapes keep every structural fact of the real models (patch (1,2,2), two experts with the
A14B channel counts, the Wan 2.1 / 2.2 VAE strides and latent statistics, a UMT5 encoder with
per-block relative positions, a T5-style tokenizer with pad 0 and eos 1) and shrink only the
widths and depths. Weights are drawn from a seeded generator by our own rule rather than the
libraries' initialisers, so the model is the same across diffusers/transformers versions and
norm scales are not all 1 (a swapped norm name must change the output).
"""

from __future__ import annotations

import json
import math
import string
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from parallel_wan.builtin.kinds import (  # noqa: F401 (re-exported)
    ARCHITECTURE_OF_KIND,
    KINDS,
    architecture,
    transformer_config,
)
from parallel_wan.builtin.scheduler import TINY_SCHEDULER_CONFIG
from parallel_wan.models import registry
from parallel_wan.models.experts import DIFFUSERS_FOLDERS, HIGH, LOW, OFFICIAL_FOLDERS
from parallel_wan.models.transformer_config import TransformerConfig
from parallel_wan.models.variants import IMAGE, JOINED_CHANNELS
from parallel_wan.weights import animate_keymap, t5_keymap, transformer_keymap

TEXT_DIM = registry.TINY_TEXT_DIM  # the tiny UMT5's d_model, which is the transformer's text_dim

_WORDS = """a an the and or of in on at to from with by for as is are was be it its this that
these those his her their our your my he she they we you who what where when while
cat cats dog dogs bird fish horse man woman child children people person girl boy face hand
hands eyes hair body run runs running walk walks walking jump jumps fly flies flying swim
swimming sit sits sitting stand standing play plays playing dance dancing look looks
camera shot close up wide view slow motion video scene light lights sun sunlight sunset night
day sky cloud clouds rain snow water sea ocean river beach forest tree trees grass flower
flowers mountain city street road car cars house room kitchen table window door fire
red blue green yellow white black orange purple gold silver bright dark soft warm cold
big small little tall long short old young beautiful cute happy sad fast quiet
cinematic realistic detailed high quality style art painting photo background foreground
overexposed static blurred details subtitles works paintings images overall gray worst low
jpeg compression residue ugly incomplete extra fingers poorly drawn hands faces deformed
disfigured misshapen limbs fused still picture messy three legs many walking backwards""".split()


@dataclass
class TinyModel:
    kind: str  # a tiny kind (t2v, i2v, ti2v) or a built-in architecture's name (builtin/kinds.py)
    transformer: object  # diffusers WanTransformer3DModel: the high-noise expert (the only one for ti2v)
    transformer_2: object | None  # the low-noise expert
    vae: object  # diffusers AutoencoderKLWan
    vae_kind: str  # "wan2.1" | "wan2.2"
    text_encoder: object  # transformers UMT5EncoderModel
    tokenizer: object  # transformers fast tokenizer
    scheduler_config: dict  # diffusers UniPCMultistepScheduler config (flow matching)
    boundary_ratio: float | None
    image_encoder: object | None = None  # transformers CLIPVisionModel (Animate), else None
    image_processor: object | None = None  # transformers CLIPImageProcessor beside it
    audio_encoder: object | None = None  # transformers Wav2Vec2ForCTC (S2V), else None
    audio_processor: object | None = None  # transformers Wav2Vec2Processor beside it


def vae_kind(arch: registry.Architecture) -> str:
    return "wan2.2" if arch.vae.z_dim == 48 else "wan2.1"


def build_tiny(kind: str = "t2v", seed: int = 0) -> TinyModel:
    """All components of a tiny Wan 2.2 model of this kind (or built-in architecture),
    deterministic in `seed`."""
    architecture(kind)  # refuses an unknown kind before anything is built
    # The libraries' constructors draw their own (discarded) init from the global RNG; fork it
    # so building a tiny model never shifts the caller's random stream.
    with torch.random.fork_rng(devices=[]):
        return _build(kind, seed)


def _build(kind: str, seed: int) -> TinyModel:
    import diffusers
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler
    from transformers import UMT5Config, UMT5EncoderModel

    arch = architecture(kind)
    if arch.transformer.s2v is not None:  # no diffusers class: a module of the parameter table
        experts = [ParamTree(arch.transformer)]
    else:
        transformer_class = getattr(diffusers, arch.transformer.diffusers_class)
        experts = [transformer_class(**arch.transformer.to_diffusers()) for _ in arch.variant.experts]
    vae = AutoencoderKLWan(**arch.vae.to_diffusers())

    tokenizer = build_tokenizer()
    vocab = 8 * math.ceil(len(tokenizer) / 8)
    text_encoder = UMT5EncoderModel(
        UMT5Config(
            vocab_size=vocab,
            dropout_rate=0.0,
            layer_norm_epsilon=1e-6,
            pad_token_id=0,
            eos_token_id=1,
            decoder_start_token_id=0,
            **arch.text_encoder,
        )
    )

    image_encoder = image_processor = None
    if arch.image_encoder is not None:
        image_encoder, image_processor = _clip(arch.image_encoder)

    audio_encoder = audio_processor = None
    if arch.audio_encoder is not None:
        audio_encoder, audio_processor = _wav2vec(arch.audio_encoder)

    # One generator stream per component, so one component's size never shifts another's weights
    # (the image and audio encoders last: the other kinds' streams stay as they were before).
    modules = [*experts, vae, text_encoder] + [m for m in (image_encoder, audio_encoder) if m is not None]
    for index, module in enumerate(modules):
        _randomize(module, torch.Generator().manual_seed(seed * 16 + index))
        module.eval().requires_grad_(False)

    scheduler = UniPCMultistepScheduler(**TINY_SCHEDULER_CONFIG, flow_shift=arch.shift)
    scheduler_config = {k: v for k, v in dict(scheduler.config).items() if not k.startswith("_")}
    return TinyModel(
        kind=kind,
        transformer=experts[0],
        transformer_2=experts[1] if len(experts) > 1 else None,
        vae=vae,
        vae_kind=vae_kind(arch),
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        scheduler_config=scheduler_config,
        boundary_ratio=arch.boundary,
        image_encoder=image_encoder,
        image_processor=image_processor,
        audio_encoder=audio_encoder,
        audio_processor=audio_processor,
    )


class ParamTree(torch.nn.Module):
    """A module holding exactly the parameters of a transformer config's table (models/
    transformer_shapes.param_shapes), nested by their dotted names: a model with no library
    class (S2V-14B's official WanModel_S2V lives only in the official package) built and written
    like the others. `config` is its official config.json."""

    def __init__(self, cfg: TransformerConfig):
        from parallel_wan.models.transformer_shapes import param_shapes

        super().__init__()
        self.transformer_config = cfg
        self.config = cfg.to_official("s2v" if cfg.s2v is not None else "t2v")
        for name, shape in param_shapes(cfg).items():
            owner = self
            *path, leaf = name.split(".")
            for part in path:
                if not hasattr(owner, part):
                    owner.add_module(part, torch.nn.Module())
                owner = getattr(owner, part)
            owner.register_parameter(leaf, torch.nn.Parameter(torch.zeros(shape)))


def _wav2vec(fields: dict):
    """A wav2vec2 CTC model of these Wav2Vec2Config fields and its processor (the feature
    extractor normalising 16 kHz samples, and a character vocabulary): the folder S2V ships."""
    from transformers import (
        Wav2Vec2Config,
        Wav2Vec2CTCTokenizer,
        Wav2Vec2FeatureExtractor,
        Wav2Vec2ForCTC,
        Wav2Vec2Processor,
    )

    config = Wav2Vec2Config(**fields)
    letters = ["<pad>", "<s>", "</s>", "<unk>", "|"] + list("ETAONIRSHDLUCMFWGYPBVKXJQZ'")
    vocab = {c: i for i, c in enumerate(letters[: config.vocab_size])}
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "vocab.json").write_text(json.dumps(vocab))
        tokenizer = Wav2Vec2CTCTokenizer(str(Path(folder) / "vocab.json"))
    extractor = Wav2Vec2FeatureExtractor(
        feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True, return_attention_mask=True
    )
    return Wav2Vec2ForCTC(config), Wav2Vec2Processor(feature_extractor=extractor, tokenizer=tokenizer)


def _clip(fields: dict):
    """A CLIP vision tower of these CLIPVisionConfig fields and the processor that feeds it
    (resize the short side, centre-crop to the tower's image size, CLIP's mean and std — as the
    ViT-H/14's own preprocessor_config.json says at 224)."""
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    side = fields["image_size"]
    processor = CLIPImageProcessor(size={"shortest_edge": side}, crop_size={"height": side, "width": side})
    return CLIPVisionModel(CLIPVisionConfig(**fields)), processor


@torch.no_grad()
def _randomize(module: torch.nn.Module, generator: torch.Generator) -> None:
    for name, param in module.named_parameters():
        noise = torch.randn(param.shape, generator=generator, dtype=torch.float32)
        owner, _, leaf = name.rpartition(".")
        if leaf == "bias":
            value = 0.02 * noise
        elif leaf == "gamma" or "norm" in owner.rpartition(".")[2]:
            value = 1.0 + 0.1 * noise  # norm scales near 1, but not equal to each other
        elif leaf == "scale_shift_table":
            value = noise / math.sqrt(param.shape[-1])
        elif name.startswith("motion_encoder.") and leaf in ("weight", "motion_synthesis_weight"):
            # equalised learning rate: the forward scales by 1/√fan_in itself, so the stored
            # weights are unit normal (StyleGAN's, and diffusers' own init); 1/√fan_in here
            # too would shrink every motion vector to ~0 and the face would not matter
            value = noise
        else:
            fan_in = param.numel() // param.shape[0] if param.ndim > 1 else param.numel()
            value = noise / math.sqrt(fan_in)
        param.copy_(value)


def build_tokenizer():
    """A T5-style Unigram tokenizer (pad 0, eos 1, unk 2, '▁' word starts) made in-process.

    Common English words are single pieces; any other ASCII text falls back to characters;
    anything else (the Chinese default negative prompt) becomes <unk>, as rare characters do
    for the real UMT5 vocabulary.
    """
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=_tokenizers_tokenizer(),
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=512,
    )


def tokenizer_size() -> int:
    """len(build_tokenizer()) without importing transformers (1.3 s): the planner sizes the tiny
    text encoder's vocabulary from it."""
    return _tokenizers_tokenizer().get_vocab_size(with_added_tokens=True)


def _tokenizers_tokenizer():
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    chars = [c for c in string.printable if not c.isspace()]
    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -6.0)]
    pieces += [("▁" + w, -4.0) for w in dict.fromkeys(_WORDS)]
    pieces += [("▁" + c, -9.0) for c in chars] + [(c, -10.0) for c in chars]
    tokenizer = Tokenizer(models.Unigram(pieces, unk_id=2, byte_fallback=False))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)]
    )
    return tokenizer


# ------------------------------------------------------------------------------ writing
def write_checkpoint(model: TinyModel, directory: str | Path, layout: str = "diffusers") -> Path:
    """Write every component as a checkpoint folder in the diffusers or the official layout."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if layout == "diffusers":
        if model.audio_encoder is not None:
            raise ValueError(
                f"{model.kind} has no diffusers layout (there is no diffusers S2V pipeline); use layout=official"
            )
        _write_diffusers(model, directory)
    elif layout == "official":
        _write_official(model, directory)
    else:
        raise ValueError(f"layout={layout!r} is not a checkpoint layout; use 'diffusers' or 'official'")
    return directory


def _write_diffusers(model: TinyModel, root: Path) -> None:
    import diffusers

    variant = architecture(model.kind).variant
    image = variant.input(IMAGE)
    image_channels = image is not None and image.enters == JOINED_CHANNELS  # diffusers' I2V pipeline
    pipeline = "WanImageToVideoPipeline" if image_channels else "WanPipeline"
    if variant.image_features:
        pipeline = "WanAnimatePipeline"
    index = {"_class_name": pipeline, "_diffusers_version": diffusers.__version__}
    index["vae"] = ["diffusers", "AutoencoderKLWan"]
    index["text_encoder"] = ["transformers", "UMT5EncoderModel"]
    index["tokenizer"] = ["transformers", type(model.tokenizer).__name__]
    if model.image_encoder is not None:
        index["image_encoder"] = ["transformers", type(model.image_encoder).__name__]
        index["image_processor"] = ["transformers", type(model.image_processor).__name__]
    elif image_channels:
        # Wan 2.2 I2V has no CLIP image branch; diffusers records the absent components as nulls
        index["image_encoder"] = [None, None]
        index["image_processor"] = [None, None]
    index["transformer"] = ["diffusers", type(model.transformer).__name__]
    index["scheduler"] = ["diffusers", "UniPCMultistepScheduler"]
    second = DIFFUSERS_FOLDERS[LOW]
    if not variant.image_features:  # WanAnimatePipeline takes one transformer, no boundary, no expand
        index[second] = ["diffusers", "WanTransformer3DModel"] if model.transformer_2 is not None else [None, None]
        index["boundary_ratio"] = model.boundary_ratio
        index["expand_timesteps"] = variant.per_token_timestep
    _write_json(root / "model_index.json", index)
    if model.image_encoder is not None:
        model.image_encoder.config.save_pretrained(root / "image_encoder")
        save_file(
            _plain(model.image_encoder.state_dict()),
            root / "image_encoder" / "model.safetensors",
            metadata={"format": "pt"},
        )
        model.image_processor.save_pretrained(root / "image_processor")

    for folder, expert in ((DIFFUSERS_FOLDERS[HIGH], model.transformer), (second, model.transformer_2)):
        if expert is not None:
            expert.save_config(root / folder)
            _write_shards(expert.state_dict(), root / folder)
    model.vae.save_config(root / "vae")
    save_file(
        _plain(model.vae.state_dict()), root / "vae" / "diffusion_pytorch_model.safetensors", metadata={"format": "pt"}
    )
    # What transformers' save_pretrained writes (config + one file, tied embedding stored once),
    # without its progress bar on every default run.
    model.text_encoder.config.save_pretrained(root / "text_encoder")
    text_state = {k: v for k, v in model.text_encoder.state_dict().items() if k != "encoder.embed_tokens.weight"}
    save_file(_plain(text_state), root / "text_encoder" / "model.safetensors", metadata={"format": "pt"})
    model.tokenizer.save_pretrained(root / "tokenizer")
    _write_json(
        root / "scheduler" / "scheduler_config.json",
        {
            "_class_name": "UniPCMultistepScheduler",
            "_diffusers_version": diffusers.__version__,
            **model.scheduler_config,
        },
    )


def _write_official(model: TinyModel, root: Path) -> None:
    from parallel_wan.weights import vae_keymap

    experts = (
        {"": model.transformer}
        if model.transformer_2 is None
        else {OFFICIAL_FOLDERS[HIGH]: model.transformer, OFFICIAL_FOLDERS[LOW]: model.transformer_2}
    )
    task = architecture(model.kind).variant.task
    for folder, expert in experts.items():
        if isinstance(expert, ParamTree):
            config = expert.config
        else:
            config = TransformerConfig.from_diffusers(dict(expert.config)).to_official(task)
        _write_json(root / folder / "config.json", config)
        state = expert.state_dict()
        dit = {name: tensor for name, tensor in state.items() if not animate_keymap.is_animate_name(name)}
        # Animate's motion encoder, face encoder and adapters: fused, reshaped, the blur kernels added
        _write_shards(
            {**transformer_keymap.diffusers_to_official(dit), **animate_keymap.to_official(state)}, root / folder
        )
    vae_file = "Wan2.2_VAE.pth" if model.vae_kind == "wan2.2" else "Wan2.1_VAE.pth"
    torch.save(_plain(vae_keymap.diffusers_to_official(model.vae.state_dict(), model.vae_kind)), root / vae_file)
    # Named as the official file; the tiny weights stay fp32 so both layouts hold identical values.
    t5 = t5_keymap.transformers_to_official(model.text_encoder.state_dict())
    torch.save(_plain(t5), root / "models_t5_umt5-xxl-enc-bf16.pth")
    model.tokenizer.save_pretrained(root / "google" / "umt5-xxl")
    if model.image_encoder is not None:  # Animate: open-clip's file, of which the vision tower is read
        from parallel_wan.weights.clip_keymap import to_official as clip_to_official
        from parallel_wan.weights.layout import OFFICIAL_CLIP

        torch.save(_plain(clip_to_official(model.image_encoder.state_dict())), root / OFFICIAL_CLIP)
    if model.audio_encoder is not None:  # S2V: the wav2vec2 folder, as transformers writes it
        from parallel_wan.weights.layout import OFFICIAL_WAV2VEC

        folder = root / OFFICIAL_WAV2VEC
        model.audio_encoder.config.save_pretrained(folder)
        save_file(_plain(model.audio_encoder.state_dict()), folder / "model.safetensors", metadata={"format": "pt"})
        # the feature extractor's own preprocessor_config.json and the tokenizer's files, as the
        # released folder has them (a processor's save may fold them into one file)
        model.audio_processor.feature_extractor.save_pretrained(folder)
        model.audio_processor.tokenizer.save_pretrained(folder)


def _write_shards(state_dict: dict, folder: Path, shards: int = 2) -> None:
    """Safetensors shards plus the index json, split by bytes (at least two shards, always)."""
    folder.mkdir(parents=True, exist_ok=True)
    state_dict = _plain(state_dict)
    names = list(state_dict)
    sizes = [state_dict[n].numel() * state_dict[n].element_size() for n in names]
    total = sum(sizes)
    groups: list[list[str]] = [[] for _ in range(shards)]
    cumulative = 0
    for name, size in zip(names, sizes):
        groups[min(cumulative * shards // max(total, 1), shards - 1)].append(name)
        cumulative += size
    if any(not group for group in groups):  # a few very unequal tensors: split by count instead
        step = math.ceil(len(names) / shards)
        groups = [names[i * step : (i + 1) * step] for i in range(shards)]
    weight_map = {}
    for i, group in enumerate(groups):
        file = f"diffusion_pytorch_model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: state_dict[n] for n in group}, folder / file, metadata={"format": "pt"})
        weight_map.update({n: file for n in group})
    _write_json(
        folder / "diffusion_pytorch_model.safetensors.index.json",
        {"metadata": {"total_size": total}, "weight_map": weight_map},
    )


def _plain(state_dict: dict) -> dict:
    # Own, contiguous storage per tensor: safetensors refuses shared or strided storage.
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in state_dict.items()}


def _write_json(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n")
