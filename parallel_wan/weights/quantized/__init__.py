"""Quantized linear weights: the one in-memory form, quantizing a wide weight into it, at load and
after a LoRA merge.

Every quantized file format (Kijai/ComfyUI scaled fp8, ComfyUI mixed precision, LightX2V) and
`quantize=fp8|int8|nvfp4` at load end in the same form, so backends, memory modes and caches see one
thing: a block linear's params dict holds

    weight        int8 or float8_e4m3fn, (out, in)       — the stored values q
    weight_scale  float32, (out, G), G dividing `in`      — W[o, i] = q[o, i] · s[o, i // (in / G)]
    bias          as for any linear (the run's dtype)

NVFP4 (ComfyUI's and LightX2V's nvfp4 files, `quantize=nvfp4`) is the one exception to one
byte a weight, and has three tensors, every one per output row all the same (nvfp4.py):

    weight          uint8, (out, in/2)              — two e2m1 codes a byte, element 2j low
    weight_scale    float8_e4m3fn, (out, in/16)     — one per block of 16 inputs, row order
    weight_scale_2  float32, (out, 1)               — W = e2m1 · weight_scale · weight_scale_2

G = 1 is one scale per output channel (LightX2V; `quantize=`; a per-tensor scalar is expanded to
its rows, exactly); G > 1 is a scale per block of in/G inputs (ComfyUI's int8 blockwise, whose
(out/128, in/128) table is repeated over each block's 128 rows). Every tensor is per output row,
so a dim-0 shard (FSDP, a sharded load) cuts weight and scale alike, and fused q‖k‖v
concatenates them. `backends/*/ops.dense` widens; the FP8 GEMM path uses G = 1 only; NVFP4's FP4 GEMM
(backends/torch/fp4_gemm.py) runs on CUDA sm_100+.

Only the transformer blocks' linears are ever quantized (`quantizable`): norms, embeddings,
modulation tables and the head stay as the references keep them.

Its parts: `names` (which tensors are quantized and their scales' names; no torch, so the memory
planner and the settings checks ask without importing torch), `form` (the stored dtypes, their
limits, quantizing rows and widening them back), `nvfp4` (NVFP4's packing, scales and the GEMM's
swizzled scale layout), `at_load` (`quantize=` as the loader's copy),
`lora_merge` (a LoRA on a quantized weight: dequantize, merge, requantize).

Nothing is imported here: importing `names` must not import torch.
"""
