"""An independent float64 numpy forward of the Llama family, the reference of the golden tests.

Written from the Hugging Face modeling code's definitions (llama, mistral without a window, qwen2,
qwen3), not from ours: weights by their Hugging Face names and layouts, one token at a time with
a plain list as the KV cache, RoPE in the rotate-half layout with the default frequencies.
Qwen3's q_norm and k_norm are an RMSNorm over each head before RoPE.

Used by qwen3_golden.py and smollm2_golden.py (the first python3 on PATH's .venv: numpy).
"""

import numpy as np


class LlamaFamily:
    def __init__(self, config, weights):
        """config: a config.json dict; weights: {name: array} in Hugging Face names/shapes."""
        self.c = config
        hidden = config["hidden_size"]
        self.heads = config["num_attention_heads"]
        self.kv_heads = config.get("num_key_value_heads") or self.heads
        self.head_dim = config.get("head_dim") or hidden // self.heads
        self.eps = float(config.get("rms_norm_eps", 1e-6))
        self.qk_norm = config["model_type"] == "qwen3"
        if config.get("rope_scaling"):
            raise ValueError("numpy_reference: rope_scaling is not implemented here")
        theta = float(config.get("rope_theta", 10000.0))
        self.inv_freq = 1.0 / theta ** (np.arange(0, self.head_dim, 2, dtype=np.float64)
                                        / self.head_dim)
        self.w = {k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}
        self.embed = self.w["model.embed_tokens.weight"]
        self.head = self.w.get("lm_head.weight", self.embed)

    def norm(self, x, weight):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * weight

    def rope(self, x, position):  # x: [heads, head_dim]
        angle = position * self.inv_freq
        cos, sin = np.cos(angle), np.sin(angle)
        half = self.head_dim // 2
        x1, x2 = x[:, :half], x[:, half:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=1)

    def linear(self, name, x):
        y = self.w[name + ".weight"] @ x
        bias = self.w.get(name + ".bias")
        return y if bias is None else y + bias

    def attention(self, layer, x, position, cache):
        p = f"model.layers.{layer}.self_attn."
        q = self.linear(p + "q_proj", x).reshape(self.heads, self.head_dim)
        k = self.linear(p + "k_proj", x).reshape(self.kv_heads, self.head_dim)
        v = self.linear(p + "v_proj", x).reshape(self.kv_heads, self.head_dim)
        if self.qk_norm:
            q = self.norm(q, self.w[p + "q_norm.weight"])
            k = self.norm(k, self.w[p + "k_norm.weight"])
        q, k = self.rope(q, position), self.rope(k, position)
        cache.append((k, v))
        keys = np.stack([kv[0] for kv in cache])    # [t, kv_heads, head_dim]
        values = np.stack([kv[1] for kv in cache])
        group = self.heads // self.kv_heads
        out = np.empty((self.heads, self.head_dim))
        for h in range(self.heads):
            scores = keys[:, h // group] @ q[h] / np.sqrt(self.head_dim)
            probs = np.exp(scores - scores.max())
            out[h] = (probs / probs.sum()) @ values[:, h // group]
        return self.linear(p + "o_proj", out.reshape(-1))

    def mlp(self, layer, x):
        p = f"model.layers.{layer}.mlp."
        gate = self.linear(p + "gate_proj", x)
        return self.linear(p + "down_proj", gate / (1.0 + np.exp(-gate)) *
                           self.linear(p + "up_proj", x))

    def step(self, token, position, caches):
        """Logits after `token` at `position`; caches: one list per layer, appended to."""
        x = self.embed[token].copy()
        for layer in range(self.c["num_hidden_layers"]):
            p = f"model.layers.{layer}."
            x = x + self.attention(layer, self.norm(x, self.w[p + "input_layernorm.weight"]),
                                   position, caches[layer])
            x = x + self.mlp(layer, self.norm(x, self.w[p + "post_attention_layernorm.weight"]))
        return self.head @ self.norm(x, self.w["model.norm.weight"])

    def greedy(self, prompt_ids, new_tokens):
        """(generated ids, each step's margin between its best and second-best logit)."""
        caches = [[] for _ in range(self.c["num_hidden_layers"])]
        logits = None
        for position, token in enumerate(prompt_ids):
            logits = self.step(token, position, caches)
        out, margins = [], []
        for _ in range(new_tokens):
            top2 = np.argsort(logits)[-2:]
            out.append(int(top2[1]))
            margins.append(float(logits[top2[1]] - logits[top2[0]]))
            logits = self.step(out[-1], len(prompt_ids) + len(out) - 1, caches)
        return out, margins
