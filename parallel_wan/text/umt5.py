"""The UMT5-XXL text encoder: prompts → (B, 512, 4096) embeddings, as the references make them.

Embeddings follow diffusers' WanPipeline `_get_t5_prompt_embeds` (and the official
T5EncoderModel): clean the prompt, tokenize padded to 512 with truncation, run the encoder with
the attention mask, keep each row's real tokens and zero the rest. The zeros matter: the DiT's
cross-attention has no mask, so padded slots take part in it.

Both layouts load into the encoder of `umt5_encoder.py` (transformers' UMT5EncoderModel's network
and parameter names, without its import cost) built on the meta device, then filled from our
reader (one cast copy per tensor); the official file's names are mapped on the way.
"""

from __future__ import annotations

import gc
import weakref

import torch

from parallel_wan.text.clean import clean_prompt
from parallel_wan.text.tokenizer import load_tokenizer
from parallel_wan.text.umt5_encoder import EncoderShape, UMT5Encoder
from parallel_wan.weights import t5_keymap
from parallel_wan.weights.layout import Checkpoint
from parallel_wan.weights.safetensors_io import cast, load_pth_mapped, read_safetensors, torch_dtype

TEXT_LEN = 512

# wan/configs/shared_config.py `sample_neg_prompt`, the official default negative prompt.
DEFAULT_NEGATIVE_PROMPT = (
    "色调艳丽，过曝，静态，细节模糊不清，字幕，风格，作品，画作，画面，静止，整体发灰，最差质量，低质量，"
    "JPEG压缩残留，丑陋的，残缺的，多余的手指，画得不好的手部，画得不好的脸部，畸形的，毁容的，形态畸形的肢体，"
    "手指融合，静止不动的画面，杂乱的背景，三条腿，背景人很多，倒着走"
)

# wan/configs/wan_s2v_14B.py `sample_neg_prompt`: S2V-14B's own default negative prompt.
S2V_NEGATIVE_PROMPT = (
    "画面模糊，最差质量，画面模糊，细节模糊不清，情绪激动剧烈，手快速抖动，字幕，丑陋的，残缺的，多余的手指，"
    "画得不好的手部，画得不好的脸部，畸形的，毁容的，形态畸形的肢体，手指融合，静止不动的画面，杂乱的背景，三条腿，"
    "背景人很多，倒着走"
)


class TextEncoder:
    def __init__(self, model, tokenizer, text_len: int = TEXT_LEN):
        # tokenizer(texts, length) → (input_ids, attention_mask): text/tokenizer.py
        self.model = model
        self.tokenizer = tokenizer
        self.text_len = text_len

    @classmethod
    def load(cls, checkpoint: Checkpoint, dtype: str = "bfloat16", device: str | torch.device = "cpu"):
        model = load_umt5(checkpoint, dtype).to(device)
        return cls(model, load_tokenizer(checkpoint.tokenizer_path))

    @property
    def dim(self) -> int:
        return self.model.d_model

    @torch.no_grad()
    def encode(self, prompts: list[str]) -> torch.Tensor:
        """(len(prompts), text_len, dim) in the encoder's dtype. Pass prompt and negative
        prompt together: one batched call instead of two."""
        if self.model is None:
            raise RuntimeError("the text encoder was released; encode every prompt before release()")
        if isinstance(prompts, str):
            prompts = [prompts]
        ids, mask = self.tokenizer([clean_prompt(p) for p in prompts], self.text_len)
        device = next(self.model.parameters()).device
        ids, mask = ids.to(device), mask.to(device)
        hidden = self.model(ids, mask)
        lengths = mask.gt(0).sum(dim=1).tolist()
        out = hidden.new_zeros(hidden.shape)
        for row, length in enumerate(lengths):
            out[row, :length] = hidden[row, :length]
        return out

    def release(self) -> None:
        """Drop the encoder's weights (≈11 GB in bf16 for XXL) once the prompts are encoded."""
        first = next(self.model.parameters()) if self.model is not None else None
        device = first.device if first is not None else None
        alive = weakref.ref(first) if first is not None else None
        del first
        self.model = None
        # the encoder module holds no reference cycle, so dropping it frees the weights at
        # once; a full collection (0.3-0.5 s in a process that has imported torch, transformers
        # and diffusers) only when something still holds them through a cycle.
        if alive is not None and alive() is not None:
            gc.collect()
        if device is not None and device.type == "cuda":
            torch.cuda.empty_cache()


def load_umt5(checkpoint: Checkpoint, dtype: str = "bfloat16") -> UMT5Encoder:
    """The UMT5 encoder with the checkpoint's weights, in `dtype`."""
    target = torch_dtype(dtype)
    if checkpoint.text_encoder_format == "diffusers":
        shape = EncoderShape.from_config_file(checkpoint.text_encoder_path / "config.json")
        state = read_safetensors(checkpoint.text_encoder_path, dtype=target, keep_fp32=_keep_fp32(target))
    else:
        official = load_pth_mapped(checkpoint.text_encoder_path)
        shape = EncoderShape.from_config(
            t5_keymap.umt5_config_from_official({k: tuple(v.shape) for k, v in official.items()}),
            str(checkpoint.text_encoder_path),
        )
        mapped = t5_keymap.official_to_transformers(official)
        keep = _keep_fp32(target)
        state = {name: cast(t, name, target, keep, checkpoint.text_encoder_path) for name, t in mapped.items()}
    # `shared` and the encoder's embedding are one module; checkpoints may store either name or
    # both (then the encoder's is assigned last and used, as in transformers' class)
    state.setdefault("encoder.embed_tokens.weight", state["shared.weight"])
    state.setdefault("shared.weight", state["encoder.embed_tokens.weight"])
    with torch.device("meta"):
        model = UMT5Encoder(shape)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    if missing or unexpected:
        raise ValueError(
            f"text encoder at {checkpoint.text_encoder_path}: weights do not fit UMT5EncoderModel "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]}); expected the umt5-xxl encoder"
        )
    return model.eval().requires_grad_(False)


def _keep_fp32(target: torch.dtype):
    # transformers keeps UMT5's FFN output projections (`wo`) in fp32 when loading in fp16,
    # where they overflow; bf16 and fp32 loads cast everything.
    if target != torch.float16:
        return None
    return lambda name: "wo" in name.split(".")
