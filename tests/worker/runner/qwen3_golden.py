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
import subprocess
import sys
import tempfile

import numpy as np
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
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


def ours(cli, model, tokenizer, prompt):
    out = subprocess.run(
        [cli, "generate", "--model", model, "--tokenizer", tokenizer, "--prompt", prompt,
         "--max-tokens", str(NEW_TOKENS), "--temperature", "0", "--ignore-eos", "--ids",
         "--backend", "cpu", "--threads", "2"],
        capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"llm-cli generate failed ({out.returncode}): {out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--tokenizer", required=True, help="the Qwen3 tokenizer's directory")
    args = ap.parse_args()
    if not os.path.isfile(os.path.join(args.tokenizer, "tokenizer.json")):
        sys.exit(f"{args.tokenizer}: no tokenizer.json (is ../shared present?)")
    weights = random_weights(CONFIG, seed=3)
    reference = LlamaFamily(CONFIG, weights)
    failures = 0
    with tempfile.TemporaryDirectory() as model:
        with open(os.path.join(model, "config.json"), "w", encoding="utf-8") as f:
            json.dump(CONFIG, f)
        save_file(weights, os.path.join(model, "model.safetensors"))
        for prompt in PROMPTS:
            got = ours(args.cli, model, args.tokenizer, prompt)
            want, margins = reference.greedy(got["prompt_ids"], NEW_TOKENS)
            if got["generated_ids"] != want:
                i = next(i for i, (a, b) in enumerate(zip(got["generated_ids"], want)) if a != b)
                print(f"FAIL {prompt!r}: token {i}: ours {got['generated_ids'][i]}, reference "
                      f"{want[i]} (reference margin {margins[i]:.2e})\n  ours {got['generated_ids']}"
                      f"\n  want {want}")
                failures += 1
            else:
                print(f"ok   {prompt!r}: {len(want)} tokens (smallest margin {min(margins):.2e})")
    if failures:
        sys.exit(f"{failures} of {len(PROMPTS)} prompts differ from the float64 reference")
    print(f"all {len(PROMPTS)} prompts agree with the float64 numpy reference")


if __name__ == "__main__":
    main()
