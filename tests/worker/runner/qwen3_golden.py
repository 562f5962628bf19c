"""Qwen3's golden test: a small random Qwen3 checkpoint written here (numpy + safetensors, not
our writer), run greedily by `llm-cli generate` on the CPU backend, must give the token ids of
numpy_reference.py's float64 forward over the same weights.

The checkpoint has what sets Qwen3 apart: q_norm and k_norm weights far from 1 (so a missing or
misplaced norm changes the answer), head_dim 32 where hidden / heads is 16, GQA (4 query heads,
2 KV heads), no q/k/v biases, tied embeddings, Qwen3's vocabulary and real tokenizer.

  .venv/bin/python qwen3_golden.py --cli build/bin/llm-cli --tokenizer ../shared/tokenizers/qwen3
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

CONFIG = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936,
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "tie_word_embeddings": True, "attention_bias": False, "hidden_act": "silu",
    "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "float32",
}
PROMPTS = ["The capital of France is", "def fibonacci(n):", "東京は日本の首都です。",
           "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich."]
NEW_TOKENS = 24


def random_weights(c, seed):
    rng = np.random.default_rng(seed)
    h, q, kv = c["hidden_size"], c["num_attention_heads"] * c["head_dim"], \
        c["num_key_value_heads"] * c["head_dim"]
    inter, hd = c["intermediate_size"], c["head_dim"]

    def matrix(rows, cols):  # unit-scale outputs: uniform +- sqrt(3 / fan_in)
        return rng.uniform(-1, 1, (rows, cols)) * np.sqrt(3.0 / cols)

    def norm(n):
        return 1.0 + rng.uniform(-0.5, 0.5, n)

    w = {"model.embed_tokens.weight": rng.uniform(-1, 1, (c["vocab_size"], h)),
         "model.norm.weight": norm(h)}
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        w.update({
            p + "input_layernorm.weight": norm(h),
            p + "self_attn.q_proj.weight": matrix(q, h),
            p + "self_attn.k_proj.weight": matrix(kv, h),
            p + "self_attn.v_proj.weight": matrix(kv, h),
            p + "self_attn.q_norm.weight": 1.0 + rng.uniform(-0.9, 2.0, hd),
            p + "self_attn.k_norm.weight": 1.0 + rng.uniform(-0.9, 2.0, hd),
            p + "self_attn.o_proj.weight": matrix(h, q),
            p + "post_attention_layernorm.weight": norm(h),
            p + "mlp.gate_proj.weight": matrix(inter, h),
            p + "mlp.up_proj.weight": matrix(inter, h),
            p + "mlp.down_proj.weight": matrix(h, inter),
        })
    return {k: v.astype(np.float32) for k, v in w.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--tokenizer", required=True, help="the Qwen3 tokenizer's directory")
    args = ap.parse_args()
    if not os.path.isfile(os.path.join(args.tokenizer, "tokenizer.json")):
        sys.exit(f"{args.tokenizer}: no tokenizer.json (is ../shared present?)")
    weights = random_weights(CONFIG, seed=3)
    reference = LlamaFamily(CONFIG, weights)
    with tempfile.TemporaryDirectory() as model:
        with open(os.path.join(model, "config.json"), "w", encoding="utf-8") as f:
            json.dump(CONFIG, f)
        save_file(weights, os.path.join(model, "model.safetensors"))
        compare(args.cli, model, reference, PROMPTS, NEW_TOKENS, "--tokenizer", args.tokenizer,
                "--threads", "2")

if __name__ == "__main__":
    main()
