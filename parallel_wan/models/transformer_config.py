"""Dimensions of a Wan DiT, read from a checkpoint's config (either layout) or a preset."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .animate_config import ANIMATE_KEYS, AnimateConfig
from .s2v_config import S2VConfig
from .variants import TASKS

DIT_CLASS = "WanTransformer3DModel"  # diffusers' class of a T2V/I2V/TI2V expert
ANIMATE_CLASS = "WanAnimateTransformer3DModel"
OFFICIAL_ANIMATE_CLASS = "WanAnimateModel"  # the official class (wan/modules/animate/model_animate.py)


def is_official_animate(cfg: dict) -> bool:
    """An official config.json of Animate-14B: its class's name, or (written by hand) its keys."""
    return (
        cfg.get("model_type") == "animate"
        or cfg.get("_class_name") == OFFICIAL_ANIMATE_CLASS
        or ("motion_encoder_dim" in cfg and "num_heads" in cfg)
    )


@dataclass(frozen=True)
class TransformerConfig:
    # Field names and defaults follow diffusers' WanTransformer3DModel config (A14B T2V values).
    patch_size: tuple[int, int, int] = (1, 2, 2)
    num_attention_heads: int = 40
    attention_head_dim: int = 128
    in_channels: int = 16
    out_channels: int = 16
    text_dim: int = 4096
    freq_dim: int = 256
    ffn_dim: int = 13824
    num_layers: int = 40
    cross_attn_norm: bool = True
    qk_norm: str | None = "rms_norm_across_heads"
    eps: float = 1e-6
    image_dim: int | None = None
    added_kv_proj_dim: int | None = None
    rope_max_seq_len: int = 1024
    text_len: int = 512
    animate: AnimateConfig | None = None  # Animate-14B's motion and face dimensions (animate_config.py)
    s2v: S2VConfig | None = None  # S2V-14B's audio and motion-frame dimensions (s2v_config.py)
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @property
    def diffusers_class(self) -> str:
        return ANIMATE_CLASS if self.animate is not None else DIT_CLASS

    @classmethod
    def from_diffusers(cls, cfg: dict) -> TransformerConfig:
        known = {f.name for f in dataclasses.fields(cls)} - {"extra", "text_len", "animate", "s2v"}
        kwargs = {k: v for k, v in cfg.items() if k in known}
        if "patch_size" in kwargs:
            kwargs["patch_size"] = tuple(kwargs["patch_size"])
        animate = None
        # a config.json names its class; a model's in-memory config does not, but has the motion keys
        if cfg.get("_class_name") == ANIMATE_CLASS or "motion_encoder_size" in cfg:
            animate = AnimateConfig.from_diffusers(cfg)
            if kwargs.get("in_channels") is None:  # diffusers lets `latent_channels` say it
                kwargs["in_channels"] = 2 * int(cfg["latent_channels"]) + 4
            kwargs["out_channels"] = kwargs.get("out_channels") or (kwargs["in_channels"] - 4) // 2
        elif kwargs.get("image_dim") is not None:
            raise ValueError(
                "this checkpoint's transformer has an image (CLIP) branch (image_dim="
                f"{kwargs['image_dim']}); that is Wan 2.1 I2V, which parallel_wan does not run. "
                "Use a Wan 2.2 checkpoint (T2V-A14B, I2V-A14B, TI2V-5B or Animate-14B)."
            )
        taken = known | (ANIMATE_KEYS if animate is not None else set()) | {"latent_channels"}
        config = cls(**kwargs, animate=animate, extra={k: v for k, v in cfg.items() if k not in taken})
        config.check_animate()
        return config

    def check_animate(self) -> None:
        """An Animate config's image branch and motion/face dimensions are ones the forward can run."""
        if self.animate is None:
            return
        if self.extra.get("pos_embed_seq_len") is not None:
            raise ValueError(
                f"pos_embed_seq_len={self.extra['pos_embed_seq_len']}: the image branch's position "
                "embedding is Wan 2.1 FLF2V's; Animate-14B has none"
            )
        if self.image_dim is None or self.added_kv_proj_dim != self.dim:
            raise ValueError(
                f"an Animate transformer needs its image branch: image_dim (got {self.image_dim}) and "
                f"added_kv_proj_dim equal to the width {self.dim} (got {self.added_kv_proj_dim})"
            )
        self.animate.check(self.num_layers)

    @classmethod
    def from_official(cls, cfg: dict, shapes: dict | None = None) -> TransformerConfig:
        """The official `config.json` (WanModel: dim, num_heads, in_dim, …). `shapes`: the
        transformer's tensor shapes by diffusers name, which an Animate config needs (its
        motion and face dimensions are fixed in the official code, not written in the file)."""
        model_type = cfg.get("model_type", "t2v")
        s2v = animate = None
        if model_type == "s2v" or cfg.get("_class_name") == "WanModel_S2V":
            s2v = S2VConfig.from_official(cfg)
            model_type = "s2v"
        if is_official_animate(cfg):  # its config has no model_type
            if shapes is None:
                raise ValueError("an official Animate-14B config.json is read with its tensors' shapes")
            animate, model_type = AnimateConfig.from_shapes(shapes, int(cfg["num_layers"])), "animate"
        if model_type not in TASKS:
            raise ValueError(
                f"official config model_type {model_type!r} is not a Wan 2.2 T2V/I2V/TI2V/S2V model; "
                "parallel_wan runs t2v, i2v, ti2v and s2v checkpoints"
            )
        dim, heads = int(cfg["dim"]), int(cfg["num_heads"])
        if dim % heads:
            raise ValueError(f"official config: dim {dim} is not divisible by num_heads {heads}")
        config = cls(
            patch_size=tuple(cfg.get("patch_size", (1, 2, 2))),
            num_attention_heads=heads,
            attention_head_dim=dim // heads,
            in_channels=int(cfg["in_dim"]),
            out_channels=int(cfg["out_dim"]),
            text_dim=int(cfg.get("text_dim", 4096)),
            freq_dim=int(cfg.get("freq_dim", 256)),
            ffn_dim=int(cfg["ffn_dim"]),
            num_layers=int(cfg["num_layers"]),
            cross_attn_norm=bool(cfg.get("cross_attn_norm", True)),
            qk_norm="rms_norm_across_heads" if cfg.get("qk_norm", True) else None,
            eps=float(cfg.get("eps", 1e-6)),
            text_len=int(cfg.get("text_len", 512)),
            s2v=s2v,
            animate=animate,
            # Animate's image branch: CLIP's width into the embedder, keys and values of the model's
            image_dim=shapes["condition_embedder.image_embedder.norm1.weight"][0] if animate is not None else None,
            added_kv_proj_dim=dim if animate is not None else None,
        )
        if s2v is not None:
            s2v.check(config.num_layers, config.dim)
        config.check_animate()
        return config

    def to_diffusers(self) -> dict:
        """The constructor's keyword arguments of `diffusers_class` (a config.json without its
        `_class_name`)."""
        skip = ("extra", "text_len", "animate", "s2v")
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in skip}
        d["patch_size"] = list(self.patch_size)
        if self.animate is not None:
            d.update(self.animate.to_diffusers())
        return d

    def to_official(self, model_type: str) -> dict:
        """The official `config.json` of a model of this variant's task (`model_type`: t2v, i2v,
        ti2v, s2v, animate — WanAnimateModel's has no model_type, its dimensions are in code)."""
        if self.animate is not None:
            head = {"_class_name": OFFICIAL_ANIMATE_CLASS}
            extra = {"motion_encoder_dim": self.animate.motion_encoder_dim, "use_img_emb": True}
        else:
            head = {"_class_name": "WanModel_S2V" if self.s2v is not None else "WanModel", "model_type": model_type}
            extra = {} if self.s2v is None else self.s2v.to_official()
        return {
            **head,
            "patch_size": list(self.patch_size),
            "text_len": self.text_len,
            "in_dim": self.in_channels,
            "dim": self.dim,
            "ffn_dim": self.ffn_dim,
            "freq_dim": self.freq_dim,
            "text_dim": self.text_dim,
            "out_dim": self.out_channels,
            "num_heads": self.num_attention_heads,
            "num_layers": self.num_layers,
            "qk_norm": self.qk_norm is not None,
            "cross_attn_norm": self.cross_attn_norm,
            "eps": self.eps,
            **extra,
        }
