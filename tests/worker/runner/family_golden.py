"""The golden test of the families served through checkpoint_layout.h, and of YaRN: a small random
checkpoint of each, written here in Hugging Face's own layout (numpy + safetensors, not our writer), run
greedily by `llm-cli generate` on the CPU backend, must give the token ids of numpy_reference.py's
float64 forward over the same weights.

- phi3 (Phi-3, Phi-4): q/k/v and gate/up fused, with a sliding window shorter than the prompts
  plus their answers, so that a wrong split or window changes the answer.
- granite (Granite 3.x): its multipliers far from 1, a small embedding (so that the tied head
  does not just echo the last token) and an rms_norm_eps near the first layer's mean square. A
  numpy run of the reference with each fold forgotten in turn (the epsilon's, the residual's,
  the embedding's, the attention's) changed 64 to 72 of the 72 generated tokens. Its
  logits_scaling is below 1 (the logits are divided by it) to keep the greedy margins well above
  fp32's rounding.
- yarn: Llama with rope_scaling yarn (factor 4 over an original context of 64), so that the
  frequencies' ramp and the attention factor count.
- longrope: phi3 with partial RoPE (half of each head) and LongRoPE, served with the long
  factors (a context past the original 64) and with the short ones (--max-context 64), each
  against the reference with that set. No GGUF: LongRoPE files are refused. The reference with
  the other factor set, without the attention factor, with it on the unturned dimensions too, or
  with whole-head RoPE differs in 62, 69, 67 and 72 of the 72 tokens.

Each runs from its safetensors directory and from a GGUF file written as llama.cpp's converter
writes one (its names, metadata and q/k row order), with the real Llama 3 tokenizer.

  .venv/bin/python family_golden.py --cli build/bin/llm-cli --tokenizer ../shared/tokenizers/llama3
"""

import argparse
import json
import os
import sys
import tempfile

import numpy as np
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_util import compare  # noqa: E402
from numpy_reference import LlamaFamily  # noqa: E402

COMMON = {
    "vocab_size": 128256, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
    "rope_theta": 500000.0, "hidden_act": "silu", "bos_token_id": 128000,
    "eos_token_id": 128009, "torch_dtype": "float32",
}
CONFIGS = {
    "phi3": dict(COMMON, architectures=["Phi3ForCausalLM"], model_type="phi3",
                 rms_norm_eps=1e-5, sliding_window=12, tie_word_embeddings=False,
                 original_max_position_embeddings=512, rope_scaling=None),
    # Llama's computation with YaRN (as Qwen 2.5/3 are configured past 32k): an original context
    # of 64 puts the ramp over the first pairs of a head of 16.
    "yarn": dict(COMMON, architectures=["LlamaForCausalLM"], model_type="llama",
                 rms_norm_eps=1e-5, tie_word_embeddings=False,
                 rope_scaling={"rope_type": "yarn", "factor": 4.0,
                               "original_max_position_embeddings": 64}),
    # Phi-4-mini's RoPE: half of each head turns (its 3/4 scaled down to a head of 16), with
    # LongRoPE's per-pair factors over an original context of 64.
    "longrope": dict(COMMON, architectures=["Phi3ForCausalLM"], model_type="phi3",
                     rms_norm_eps=1e-5, tie_word_embeddings=False, partial_rotary_factor=0.5,
                     original_max_position_embeddings=64,
                     rope_scaling={"type": "longrope", "long_factor": [1.0, 1.5, 4.0, 9.0],
                                   "short_factor": [1.0, 1.1, 1.3, 2.0]}),
    "granite": dict(COMMON, architectures=["GraniteForCausalLM"], model_type="granite",
                    rms_norm_eps=0.02, tie_word_embeddings=True, attention_bias=False,
                    mlp_bias=False, embedding_multiplier=12.0, residual_multiplier=1.5,
                    attention_multiplier=1.0, logits_scaling=0.25),
}
EMBED_SCALE = {"phi3": 1.0, "granite": 0.05, "yarn": 1.0, "longrope": 1.0}
PROMPTS = ["The capital of France is", "def fibonacci(n):\n    return",
           "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich."]
NEW_TOKENS = 24


def random_weights(c, seed, embed_scale):
    rng = np.random.default_rng(seed)
    h, inter = c["hidden_size"], c["intermediate_size"]
    hd = h // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd

    def matrix(rows, cols):  # unit-scale outputs: uniform +- sqrt(3 / fan_in)
        return rng.uniform(-1, 1, (rows, cols)) * np.sqrt(3.0 / cols)

    def norm(n):
        return 1.0 + rng.uniform(-0.5, 0.5, n)

    w = {"model.embed_tokens.weight": rng.uniform(-embed_scale, embed_scale, (c["vocab_size"], h)),
         "model.norm.weight": norm(h)}
    if not c["tie_word_embeddings"]:
        w["lm_head.weight"] = matrix(c["vocab_size"], h)
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        w.update({p + "input_layernorm.weight": norm(h),
                  p + "post_attention_layernorm.weight": norm(h),
                  p + "self_attn.o_proj.weight": matrix(h, q),
                  p + "mlp.down_proj.weight": matrix(h, inter)})
        if c["model_type"] == "phi3":
            w[p + "self_attn.qkv_proj.weight"] = matrix(q + 2 * kv, h)
            w[p + "mlp.gate_up_proj.weight"] = matrix(2 * inter, h)
            continue
        w.update({p + "self_attn.q_proj.weight": matrix(q, h),
                  p + "self_attn.k_proj.weight": matrix(kv, h),
                  p + "self_attn.v_proj.weight": matrix(kv, h),
                  p + "mlp.gate_proj.weight": matrix(inter, h),
                  p + "mlp.up_proj.weight": matrix(inter, h)})
    return {k: v.astype(np.float32) for k, v in w.items()}


GGUF_NAMES = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
              "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
              "self_attn.qkv_proj.weight": "attn_qkv.weight",
              "self_attn.o_proj.weight": "attn_output.weight",
              "post_attention_layernorm.weight": "ffn_norm.weight",
              "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
              "mlp.gate_up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
              "model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
              "lm_head.weight": "output.weight"}


def interleave(w, heads):
    """llama.cpp's converter's q/k row order (llama and granite): pairs interleaved per head."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(path, c, weights):
    """The checkpoint as llama.cpp's converter writes it (F32 tensors, its names and metadata)."""
    import gguf
    arch = c["model_type"]
    w = gguf.GGUFWriter(path, arch=arch)
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_block_count(c["num_hidden_layers"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_rope_freq_base(c["rope_theta"])
    w.add_bos_token_id(c["bos_token_id"])
    w.add_eos_token_id(c["eos_token_id"])
    if arch == "phi3":
        w.add_uint32("phi3.attention.sliding_window", c["sliding_window"])
    if c.get("rope_scaling"):
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(c["rope_scaling"]["factor"])
        w.add_rope_scaling_orig_ctx_len(c["rope_scaling"]["original_max_position_embeddings"])
    if arch == "granite":
        w.add_float32("granite.embedding_scale", c["embedding_multiplier"])
        w.add_float32("granite.residual_scale", c["residual_multiplier"])
        w.add_float32("granite.attention.scale", c["attention_multiplier"])
        w.add_float32("granite.logit_scale", c["logits_scaling"])
    for name, t in weights.items():
        if name.startswith("model.layers."):
            layer, rest = name[len("model.layers."):].split(".", 1)
            gname = f"blk.{layer}.{GGUF_NAMES[rest]}"
            if arch in ("llama", "granite") and rest == "self_attn.q_proj.weight":
                t = interleave(t, c["num_attention_heads"])
            if arch in ("llama", "granite") and rest == "self_attn.k_proj.weight":
                t = interleave(t, c["num_key_value_heads"])
        else:
            gname = GGUF_NAMES[name]
        w.add_tensor(gname, np.ascontiguousarray(t, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--tokenizer", required=True, help="the Llama 3 tokenizer's directory")
    ap.add_argument("--family", choices=sorted(CONFIGS), action="append",
                    help="the families to check (default: all)")
    args = ap.parse_args()
    if not os.path.isfile(os.path.join(args.tokenizer, "tokenizer.json")):
        sys.exit(f"{args.tokenizer}: no tokenizer.json (is ../shared present?)")
    for family in args.family or sorted(CONFIGS):
        config = CONFIGS[family]
        weights = random_weights(config, seed=7, embed_scale=EMBED_SCALE[family])
        with tempfile.TemporaryDirectory() as model:
            with open(os.path.join(model, "config.json"), "w", encoding="utf-8") as f:
                json.dump(config, f)
            save_file(weights, os.path.join(model, "model.safetensors"))
            runs = [(model, [], LlamaFamily(config, weights))]
            if family == "longrope":
                runs.append((model, ["--max-context", "64"],
                             LlamaFamily(config, weights, long_context=False)))
            else:
                gguf_path = os.path.join(model, f"{family}.gguf")
                write_gguf(gguf_path, config, weights)
                runs.append((gguf_path, [], runs[0][2]))
            for path, extra, reference in runs:
                print(f"{family} from {os.path.basename(path)} {' '.join(extra)}:")
                compare(args.cli, path, reference, PROMPTS, NEW_TOKENS, "--tokenizer",
                        args.tokenizer, "--threads", "2", *extra)


if __name__ == "__main__":
    main()
