"""An independent float64 numpy forward of the Llama family, the reference of the golden tests.

Written from the Hugging Face modeling code's definitions (llama, mistral, qwen2, qwen3, phi3,
granite), not from ours: weights by their Hugging Face names and layouts, one token at a time with
a plain list as the KV cache, RoPE in the rotate-half layout with the default frequencies.
- Qwen3's q_norm and k_norm are an RMSNorm over each head before RoPE.
- Phi3 keeps q, k and v in one matrix (self_attn.qkv_proj, rows q then k then v) and gate and up
  in another (mlp.gate_up_proj, gate's rows first).
- Granite multiplies the embedding by embedding_multiplier and each block's output by
  residual_multiplier, scales the attention's scores by attention_multiplier (in place of
  1/sqrt(head_dim)) and divides the logits by logits_scaling.
- sliding_window (mistral, phi3): a query sees the last `sliding_window` positions, itself
  included.
- rope_scaling yarn (transformers' _compute_yarn_parameters): the pairs' frequencies ramped
  between extrapolation and interpolation by `factor`, and cos and sin multiplied by the
  attention factor (0.1 ln(factor) + 1 unless given).
- rope_scaling longrope (Phi-3.5, Phi-4-mini): each pair's frequency divided by its long_factor
  or short_factor (transformers switches while a sequence is past the original context; here
  the caller picks one set, `long_context`), cos and sin times sqrt(1 + ln(s) / ln(original)),
  s = max_position_embeddings / original_max_position_embeddings.
- partial_rotary_factor (phi3): RoPE turns a head's first head_dim x factor dimensions, in
  pairs (i, i + rotary / 2), and passes the others.

Used by qwen3_golden.py, family_golden.py and smollm2_golden.py (the .venv's python: numpy).
"""

import numpy as np


class LlamaFamily:
    def __init__(self, config, weights, long_context=True):
        """config: a config.json dict; weights: {name: array} in Hugging Face names/shapes;
        long_context: longrope's factor set."""
        self.c = config
        hidden = config["hidden_size"]
        self.heads = config["num_attention_heads"]
        self.kv_heads = config.get("num_key_value_heads") or self.heads
        self.head_dim = config.get("head_dim") or hidden // self.heads
        self.eps = float(config.get("rms_norm_eps", 1e-6))
        self.qk_norm = config["model_type"] == "qwen3"
        self.fused = config["model_type"] == "phi3"
        granite = config["model_type"] == "granite"
        self.embedding_multiplier = config.get("embedding_multiplier", 1.0) if granite else 1.0
        self.residual_multiplier = config.get("residual_multiplier", 1.0) if granite else 1.0
        self.logits_scaling = config.get("logits_scaling", 1.0) if granite else 1.0
        self.score_scale = (config.get("attention_multiplier", 1.0) if granite
                            else 1.0 / np.sqrt(self.head_dim))
        self.window = config.get("sliding_window") or 0
        self.rotary = int(self.head_dim * config.get("partial_rotary_factor", 1.0))
        theta = float(config.get("rope_theta", 10000.0))
        self.inv_freq = 1.0 / theta ** (np.arange(0, self.rotary, 2, dtype=np.float64)
                                        / self.rotary)
        self.rope_scale = 1.0
        scaling = config.get("rope_scaling")
        kind = scaling and scaling.get("rope_type", scaling.get("type"))
        if kind == "yarn":
            self.yarn(scaling, theta, config["max_position_embeddings"])
        elif kind == "longrope":
            original = config["original_max_position_embeddings"]
            s = config["max_position_embeddings"] / original
            self.rope_scale = np.sqrt(1 + np.log(s) / np.log(original)) if s > 1 else 1.0
            factors = scaling["long_factor" if long_context else "short_factor"]
            self.inv_freq = self.inv_freq / np.asarray(factors, dtype=np.float64)
        elif scaling:
            raise ValueError(f"numpy_reference: rope_scaling {kind} is not implemented here")
        self.w = {k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}
        self.embed = self.w["model.embed_tokens.weight"]
        self.head = self.w.get("lm_head.weight", self.embed)

    def yarn(self, s, base, max_positions):
        factor, dim = s["factor"], self.rotary
        original = s.get("original_max_position_embeddings") or max_positions
        self.rope_scale = s.get("attention_factor") or (0.1 * np.log(factor) + 1.0
                                                        if factor > 1 else 1.0)

        def correction_dim(rotations):
            return dim * np.log(original / (rotations * 2 * np.pi)) / (2 * np.log(base))

        low = max(np.floor(correction_dim(s.get("beta_fast") or 32)), 0)
        high = min(np.ceil(correction_dim(s.get("beta_slow") or 1)), dim - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((np.arange(dim // 2) - low) / (high - low), 0, 1)
        extrapolation = 1 - ramp
        self.inv_freq = (self.inv_freq / factor * (1 - extrapolation)
                         + self.inv_freq * extrapolation)

    def norm(self, x, weight):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * weight

    def rope(self, x, position):  # x: [heads, head_dim]
        angle = position * self.inv_freq
        cos, sin = np.cos(angle) * self.rope_scale, np.sin(angle) * self.rope_scale
        half = self.rotary // 2
        x1, x2, rest = x[:, :half], x[:, half:self.rotary], x[:, self.rotary:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], axis=1)

    def linear(self, name, x):
        y = self.w[name + ".weight"] @ x
        bias = self.w.get(name + ".bias")
        return y if bias is None else y + bias

    def attention(self, layer, x, position, cache):
        p = f"model.layers.{layer}.self_attn."
        if self.fused:
            qkv = self.linear(p + "qkv_proj", x)
            q_dim, kv_dim = self.heads * self.head_dim, self.kv_heads * self.head_dim
            q, k, v = qkv[:q_dim], qkv[q_dim:q_dim + kv_dim], qkv[q_dim + kv_dim:]
        else:
            q, k, v = (self.linear(p + "q_proj", x), self.linear(p + "k_proj", x),
                       self.linear(p + "v_proj", x))
        q = q.reshape(self.heads, self.head_dim)
        k = k.reshape(self.kv_heads, self.head_dim)
        v = v.reshape(self.kv_heads, self.head_dim)
        if self.qk_norm:
            q = self.norm(q, self.w[p + "q_norm.weight"])
            k = self.norm(k, self.w[p + "k_norm.weight"])
        q, k = self.rope(q, position), self.rope(k, position)
        cache.append((k, v))
        seen = cache[-self.window:] if self.window else cache
        keys = np.stack([kv[0] for kv in seen])    # [t, kv_heads, head_dim]
        values = np.stack([kv[1] for kv in seen])
        group = self.heads // self.kv_heads
        out = np.empty((self.heads, self.head_dim))
        for h in range(self.heads):
            scores = keys[:, h // group] @ q[h] * self.score_scale
            probs = np.exp(scores - scores.max())
            out[h] = (probs / probs.sum()) @ values[:, h // group]
        return self.linear(p + "o_proj", out.reshape(-1))

    def mlp(self, layer, x):
        p = f"model.layers.{layer}.mlp."
        if self.fused:
            gate, up = np.split(self.linear(p + "gate_up_proj", x), 2)
        else:
            gate, up = self.linear(p + "gate_proj", x), self.linear(p + "up_proj", x)
        return self.linear(p + "down_proj", gate / (1.0 + np.exp(-gate)) * up)

    def step(self, token, position, caches):
        """Logits after `token` at `position`; caches: one list per layer, appended to."""
        x = self.embed[token] * self.embedding_multiplier
        r = self.residual_multiplier
        for layer in range(self.c["num_hidden_layers"]):
            p = f"model.layers.{layer}."
            x = x + r * self.attention(layer, self.norm(x, self.w[p + "input_layernorm.weight"]),
                                       position, caches[layer])
            x = x + r * self.mlp(layer,
                                 self.norm(x, self.w[p + "post_attention_layernorm.weight"]))
        return self.head @ self.norm(x, self.w["model.norm.weight"]) / self.logits_scaling

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
