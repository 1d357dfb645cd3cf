"""What a Wan 2.2 variant takes and how it runs a step, as data: the one place the rest of the
project asks "does this model take an image?", "one timestep per token?", "which experts?".

An architecture (registry.py) is a variant with dimensions; a preset names its architecture
(`conf/model/<name>.yaml`, `architecture:`), so every question is answered by the preset's name,
never by comparing task strings. The three Wan 2.2 variants:

- T2V-A14B: the prompt only; two experts (high-noise, low-noise).
- I2V-A14B: a first frame, required; it enters every step as extra channels joined to the noise
  — a mask with one channel per frame of the VAE's temporal stride (which latent frames hold the
  image) and the image's VAE latent (pipeline/conditioning.py `i2v_condition`); optionally a last
  frame, encoded in the same video as the first and marked in the same mask (first-last-frame
  video, diffusers' `last_image`).
- TI2V-5B: one expert; a first frame, optional, whose latent replaces the noise's first latent
  frame at every step (held tokens, timestep 0), so each token has its own timestep
  (diffusers' `expand_timesteps`).

- Animate-14B: one expert; a character image, required, joined as I2V's first frame is (the
  reference latent frame before the video's) and also read by CLIP (its features attended in
  every block); a pose video and a face video, required, that reach the forward as arrays of
  their own (`forward_inputs`: the pose latents' tokens, the face crops' motion tokens); in
  replace mode a background video and a mask video that fill the joined condition's frames and
  mask. Long videos are made in segments (models/animate_segments.py).

- S2V-14B: one expert; a portrait image, required, whose latent enters as tokens of its own after
  the video's (at RoPE frame 30, modulated at t = 0, never denoised); speech audio, required,
  whose wav2vec2 features reach the forward as per-frame audio tokens injected after some blocks;
  a pose video, optional, whose latents are embedded and added to the video's tokens. Long audio
  is made in clips, each continuing from the previous clip's last frames (motion tokens).

A new variant states its inputs here with how each enters the model; an input that
reaches the forward as arrays of its own (not channels joined to the noise) is a
`forward_inputs` name, which the step's inputs (pipeline/model_inputs.py) and the transformer
must then know.

Plain data (no torch, no jax).
"""

from __future__ import annotations

from dataclasses import dataclass

from .experts import ONE_EXPERT, TWO_EXPERTS

# How an input enters the model:
JOINED_CHANNELS = "joined_channels"  # its latents (and a mask) are joined to the noise's channels every step
HELD_FRAMES = "held_frames"  # its latents replace the noise's first latent frames, held at t = 0
# the last frame of the joined condition: encoded with the first frame as one video, its mask
# channel set on the last frame — no channels of its own (diffusers' `last_image`)
LAST_FRAME = "last_frame"
FORWARD_INPUT = "forward_input"  # arrays of its own in the forward (Animate's pose and face)
# fills the joined condition's frames and mask where the noise's video would be (Animate's replace mode)
SEGMENT_CONDITION = "segment_condition"
# its latent's tokens follow the video's in the sequence, at fixed positions and t = 0 (S2V's image)
REFERENCE_TOKENS = "reference_tokens"

IMAGE = "image"  # the first frame (the `image=` setting); later: video, audio, pose
LAST_IMAGE = "last_image"  # the last frame (first-last-frame video, I2V-A14B)
POSE_VIDEO = "pose_video"  # Animate: the driving poses, rendered as a video (diffusers' names)
FACE_VIDEO = "face_video"  # Animate: the driving face, cropped square per frame
BACKGROUND_VIDEO = "background_video"  # Animate replace mode: the video the character goes into
MASK_VIDEO = "mask_video"  # Animate replace mode: where the person to replace is (white)
AUDIO = "audio"  # S2V: the speech (a WAV/FLAC/MP3 file) the portrait speaks


@dataclass(frozen=True)
class Input:
    """An input a variant takes besides the prompt."""

    name: str  # the setting that gives it (IMAGE = `image=`)
    required: bool  # the variant cannot run without it
    enters: str  # JOINED_CHANNELS | HELD_FRAMES | LAST_FRAME


@dataclass(frozen=True)
class Variant:
    task: str  # what the official code calls it (t2v | i2v | ti2v): logs, the preset's record
    experts: tuple[str, ...]  # the experts' names (models/experts.py), in step order
    inputs: tuple[Input, ...] = ()  # what it takes besides the prompt
    per_token_timestep: bool = False  # one timestep per token (TI2V), else one per row
    forward_inputs: tuple[str, ...] = ()  # arrays the forward takes besides tokens, timestep, text
    image_features: bool = False  # the image also enters as CLIP features (an image encoder in the checkpoint)
    reference_frames: int = 0  # latent frames before the video's, denoised with it (Animate: the character's)

    def input(self, name: str) -> Input | None:
        """The input called `name`, or None when the variant does not take it."""
        return next((i for i in self.inputs if i.name == name), None)

    def joined_channels(self, vae) -> int:
        """Channels joined to the noise's per latent position: for an input that enters as
        channels, a mask channel per frame of the VAE's temporal stride plus its latent's."""
        joined = [i for i in self.inputs if i.enters == JOINED_CHANNELS]
        return len(joined) * (vae.scale_factor_temporal + vae.z_dim)

    def in_channels(self, vae) -> int:
        """The transformer's input channels with this VAE: the noise's and the joined ones."""
        return vae.z_dim + self.joined_channels(vae)

    def holds_frames(self, given: set[str] | frozenset[str]) -> bool:
        """Whether, with these inputs given, some latent frames are held (TI2V with an image)."""
        return any(i.enters == HELD_FRAMES and i.name in given for i in self.inputs)


T2V = Variant("t2v", TWO_EXPERTS)
I2V = Variant(
    "i2v",
    TWO_EXPERTS,
    inputs=(Input(IMAGE, required=True, enters=JOINED_CHANNELS), Input(LAST_IMAGE, required=False, enters=LAST_FRAME)),
)
TI2V = Variant("ti2v", ONE_EXPERT, inputs=(Input(IMAGE, required=False, enters=HELD_FRAMES),), per_token_timestep=True)
ANIMATE = Variant(
    "animate",
    ONE_EXPERT,
    inputs=(
        Input(IMAGE, required=True, enters=JOINED_CHANNELS),
        Input(POSE_VIDEO, required=True, enters=FORWARD_INPUT),
        Input(FACE_VIDEO, required=True, enters=FORWARD_INPUT),
        Input(BACKGROUND_VIDEO, required=False, enters=SEGMENT_CONDITION),
        Input(MASK_VIDEO, required=False, enters=SEGMENT_CONDITION),
    ),
    forward_inputs=("pose", "image", "face"),  # models/animate_transformer.SegmentInputs
    image_features=True,
    reference_frames=1,
)
S2V = Variant(
    "s2v",
    ONE_EXPERT,
    inputs=(
        Input(IMAGE, required=True, enters=REFERENCE_TOKENS),
        Input(AUDIO, required=True, enters=FORWARD_INPUT),
        Input(POSE_VIDEO, required=False, enters=FORWARD_INPUT),
    ),
    forward_inputs=("pose", "extra", "audio"),  # models/s2v_transformer.SegmentInputs
)
VARIANTS = (T2V, I2V, TI2V, ANIMATE, S2V)
TASKS = tuple(v.task for v in VARIANTS)  # the official configs' model_type values
