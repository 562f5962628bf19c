#!/usr/bin/env python3
"""Writes FP8 checkpoints of a 16/32-bit Llama checkpoint in the formats users bring, with
numpy, ml_dtypes and safetensors (pinned in scripts/requirements.txt) and none of our C++: an
independent writer for the loader's tests (tests/worker/runner/fp8_checkpoint_test.cc).

Run with the test environment's Python (.venv/bin/python, made by scripts/setup.sh):

  write_fp8_checkpoints.py --model DIR --out DIR

writes one folder per format under --out, each a checkpoint that follows the format's published
layout, plus `expected.safetensors`: every FP8 linear weight dequantised to float32 (the e4m3
value times its scale, one float32 multiply), which the C++ test compares with its own reading
bit for bit, and `format.json` naming the format and its static input scale.

  ct-channel     compressed-tensors float-quantized, weights per channel ([out, 1] BF16 scales,
                 as llm-compressor stores them in the weights' dtype), activations dynamic per token
  ct-tensor      compressed-tensors, one scale per tensor ([1] BF16), static activations
                 (input_scale [1])
  ct-block       compressed-tensors, 128x128 block weights, activations dynamic per 1x128 group
  hf-block       Hugging Face fine-grained fp8 (weight_block_size [128, 128], weight_scale_inv
                 F32 [ceil(out/128), ceil(in/128)]), DeepSeek-V3 / Qwen3-FP8 style
  hf-tensor      AutoFP8 ("quant_method": "fp8" without a block size, static activations, F32
                 scalar scales of shape [])
  modelopt       NVIDIA ModelOpt FP8: hf_quant_config.json, F32 scalar weight and input scales
"""
import argparse
import json
import os
import shutil
import struct

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

E4M3_MAX = 448.0
# Static activations: one scale for every product, so inputs up to 16 in magnitude are kept
# (the test model's normed rows and MLP activations stay well inside it).
STATIC_INPUT_SCALE = np.float32(16.0 / E4M3_MAX)
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def read_safetensors(path):
    """Every tensor of a safetensors file as float32 (or its raw dtype), read by hand."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        begin, end = meta["data_offsets"]
        raw = data[begin:end]
        if meta["dtype"] == "BF16":
            bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            arr = bits.view(np.float32)
        elif meta["dtype"] == "F16":
            arr = np.frombuffer(raw, dtype=np.float16).astype(np.float32)
        elif meta["dtype"] == "F32":
            arr = np.frombuffer(raw, dtype=np.float32)
        else:
            raise SystemExit(f"{path}: {name}: dtype {meta['dtype']} is not a 16/32-bit weight")
        out[name] = arr.reshape(meta["shape"]).copy()
    return out


def expand(scale, shape):
    if scale.size == 1:
        return np.full(shape, scale.reshape(()), dtype=np.float32)
    if scale.shape == (shape[0], 1):
        return np.repeat(scale, shape[1], axis=1)
    # [ceil(out/128), ceil(in/128)] blocks.
    full = np.repeat(np.repeat(scale, 128, axis=0), 128, axis=1)
    return np.ascontiguousarray(full[: shape[0], : shape[1]])


def amax_scale(amax):
    return np.maximum(amax / E4M3_MAX, np.finfo(np.float32).eps).astype(np.float32)


def per_tensor(w):
    return amax_scale(np.abs(w).max()).reshape([1])


def per_channel(w):
    return amax_scale(np.abs(w).max(axis=1, keepdims=True))


def per_block(w):
    out, inp = w.shape
    bo, bi = -(-out // 128), -(-inp // 128)
    padded = np.zeros((bo * 128, bi * 128), dtype=np.float32)
    padded[:out, :inp] = np.abs(w)
    return amax_scale(padded.reshape(bo, 128, bi, 128).max(axis=(1, 3)))


def as_bf16(scale):
    """BF16 scales, as compressed-tensors stores them, and the float32 they stand for."""
    b = scale.astype(ml_dtypes.bfloat16)
    return b, b.astype(np.float32)


FORMATS = {
    # name: (quantization config, scale function, scale tensor name, scale storage, static)
    "ct-channel": ("ct", per_channel, "weight_scale", "bf16", False),
    "ct-tensor": ("ct", per_tensor, "weight_scale", "bf16", True),
    "ct-block": ("ct", per_block, "weight_scale", "bf16", False),
    "hf-block": ("hf", per_block, "weight_scale_inv", "f32", False),
    "hf-tensor": ("hf", per_tensor, "weight_scale", "f32-scalar", True),
    "modelopt": ("modelopt", per_tensor, "weight_scale", "f32-scalar", True),
}


def quantization_config(name):
    kind, scale_of, _, _, static = FORMATS[name]
    if kind == "ct":
        strategy = {per_channel: "channel", per_tensor: "tensor", per_block: "block"}[scale_of]
        weights = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": strategy,
                   "dynamic": False, "group_size": None, "observer": "minmax",
                   "block_structure": [128, 128] if strategy == "block" else None}
        if static:
            inputs = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "tensor",
                      "dynamic": False, "observer": "minmax"}
        elif strategy == "block":
            inputs = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "group",
                      "group_size": 128, "dynamic": True}
        else:
            inputs = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "token",
                      "dynamic": True}
        return {"quant_method": "compressed-tensors", "format": "float-quantized",
                "quantization_status": "compressed", "global_compression_ratio": 1.5,
                "ignore": ["lm_head"], "kv_cache_scheme": None,
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                              "input_activations": inputs,
                                              "output_activations": None,
                                              "format": "float-quantized"}}}
    if kind == "hf":
        if scale_of is per_block:
            return {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                    "weight_block_size": [128, 128]}
        return {"quant_method": "fp8", "activation_scheme": "static", "ignored_layers": ["lm_head"]}
    return None


def write(model_dir, out_dir, name):
    _, scale_of, scale_name, storage, static = FORMATS[name]
    tensors = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    written, expected = {}, {}
    for tensor_name, w in tensors.items():
        module = tensor_name[: -len(".weight")] if tensor_name.endswith(".weight") else None
        if module is None or module.split(".")[-1] not in LINEAR:
            written[tensor_name] = w.astype(ml_dtypes.bfloat16)
            continue
        scale = scale_of(w)
        if storage == "bf16":
            stored, scale = as_bf16(scale)
        elif storage == "f32-scalar":
            stored = scale.reshape(())
        else:
            stored = scale
        q, dequantised = quantize_with(w, scale)
        written[tensor_name] = q
        written[f"{module}.{scale_name}"] = stored
        if static:
            written[f"{module}.input_scale"] = (
                np.array(STATIC_INPUT_SCALE, dtype=np.float32) if storage == "f32-scalar"
                else np.asarray([STATIC_INPUT_SCALE]).astype(ml_dtypes.bfloat16))
        expected[tensor_name] = dequantised
    os.makedirs(out_dir, exist_ok=True)
    save_file(written, os.path.join(out_dir, "model.safetensors"))
    save_file(expected, os.path.join(out_dir, "expected.safetensors"))
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    qc = quantization_config(name)
    if qc is not None:
        config["quantization_config"] = qc
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if name == "modelopt":
        with open(os.path.join(out_dir, "hf_quant_config.json"), "w") as f:
            json.dump({"producer": {"name": "modelopt", "version": "0.19.0"},
                       "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None,
                                        "exclude_modules": ["lm_head"]}}, f, indent=2)
    for side in ("generation_config.json", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json"):
        if os.path.exists(os.path.join(model_dir, side)):
            shutil.copyfile(os.path.join(model_dir, side), os.path.join(out_dir, side))
    static_scale = float(STATIC_INPUT_SCALE)
    if static and storage == "bf16":
        static_scale = float(np.float32(ml_dtypes.bfloat16(STATIC_INPUT_SCALE)))
    with open(os.path.join(out_dir, "format.json"), "w") as f:
        json.dump({"format": name, "static_input_scale": static_scale if static else 0.0}, f)


def quantize_with(w, scale):
    """E4M3 of w / scale (clamped to +-448 first, as every producer does: the cast itself does
    not saturate) and the dequantised float32 values (e4m3 times scale, one multiply)."""
    full = expand(scale, w.shape)
    q = np.clip(w / full, -E4M3_MAX, E4M3_MAX).astype(ml_dtypes.float8_e4m3fn)
    return q, q.astype(np.float32) * full


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="16/32-bit checkpoint directory")
    parser.add_argument("--out", required=True, help="folder for one checkpoint per format")
    parser.add_argument("--formats", default=",".join(FORMATS), help="comma-separated")
    args = parser.parse_args()
    for name in args.formats.split(","):
        write(args.model, os.path.join(args.out, name), name)
        print(f"wrote {os.path.join(args.out, name)}")


if __name__ == "__main__":
    main()
