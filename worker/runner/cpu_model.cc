#include "worker/runner/cpu_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/fp8.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "worker/model/checkpoint_layout.h"
#include "worker/model/safetensors.h"
#include "worker/runner/cpu_ops.h"

namespace llm::runner {

CpuModel::CpuModel(model::ModelConfig config, CpuWeights weights, ThreadPool* pool,
                   model::KvCacheSpec kv)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      pool_(pool),
      kv_(std::move(kv)),
      inv_freq_(model::RopeInverseFrequencies(config_)),
      rope_scale_(model::RopeAttentionFactor(config_)) {}

absl::StatusOr<std::unique_ptr<CpuModel>> CpuModel::Load(const std::string& dir, ThreadPool* pool) {
  LLM_ASSIGN_OR_RETURN(model::ModelConfig config, model::LoadModelConfig(dir));
  LLM_ASSIGN_OR_RETURN(const model::QuantScheme scheme, model::LoadQuantScheme(dir));
  LLM_ASSIGN_OR_RETURN(auto opened, model::TensorStore::Open(dir));
  LLM_ASSIGN_OR_RETURN(auto store, model::ToLlamaLayout(config, std::move(opened)));
  LLM_ASSIGN_OR_RETURN(model::KvCacheSpec kv,
                       model::ResolveKvCache("auto", scheme, config, store.get()));
  return FromStore(std::move(config), *store, pool, scheme, std::move(kv));
}

absl::StatusOr<std::unique_ptr<CpuModel>> CpuModel::FromStore(model::ModelConfig config,
                                                              const model::TensorStore& store,
                                                              ThreadPool* pool,
                                                              const model::QuantScheme& scheme,
                                                              model::KvCacheSpec kv) {
  if (kv.fp8() && (static_cast<int>(kv.k_scale.size()) != config.num_layers ||
                   static_cast<int>(kv.v_scale.size()) != config.num_layers)) {
    return absl::InvalidArgumentError("FP8 KV cache: one K and one V scale a layer are needed");
  }
  LLM_ASSIGN_OR_RETURN(CpuWeights weights, LoadCpuWeights(config, store, scheme));
  return std::make_unique<CpuModel>(std::move(config), std::move(weights), pool, std::move(kv));
}

absl::Status CpuModel::Validate(const ForwardBatch& batch, const CpuKvCache& kv) const {
  int32_t expected_begin = 0;
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const SeqChunk& c = batch.seqs[s];
    if (c.token_begin != expected_begin || c.num_tokens <= 0 || c.start_position < 0 ||
        (c.need_logits && (c.logit_tokens < 1 || c.logit_tokens > c.num_tokens))) {
      return absl::InvalidArgumentError(absl::StrCat("batch chunk ", s, " is malformed"));
    }
    expected_begin += c.num_tokens;
    const int64_t end = static_cast<int64_t>(c.start_position) + c.num_tokens;
    if (end > config_.max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat("batch chunk ", s, " reaches position ", end,
                                                     " beyond the context of ",
                                                     config_.max_position_embeddings));
    }
    const int64_t blocks_needed = (end + kv.block_tokens() - 1) / kv.block_tokens();
    if (static_cast<int64_t>(c.block_table.size()) < blocks_needed) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch chunk ", s, " has ", c.block_table.size(), " KV blocks, needs ", blocks_needed));
    }
    for (int64_t b = 0; b < blocks_needed; ++b) {
      if (c.block_table[b] < 0 || c.block_table[b] >= kv.num_blocks()) {
        return absl::InvalidArgumentError(absl::StrCat("batch chunk ", s, " names KV block ",
                                                       c.block_table[b], " outside the cache"));
      }
    }
  }
  if (expected_begin != static_cast<int32_t>(batch.token_ids.size())) {
    return absl::InvalidArgumentError("batch chunks do not cover the tokens");
  }
  for (int32_t id : batch.token_ids) {
    if (id < 0 || id >= config_.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is outside the vocabulary"));
    }
  }
  return absl::OkStatus();
}

void CpuModel::PrepareBatch(const ForwardBatch& batch) {
  const model::ModelConfig& c = config_;
  const size_t n = batch.token_ids.size();
  const size_t h = c.hidden_size, q_dim = c.q_dim(), kv_dim = c.kv_dim();
  const size_t inter = c.intermediate_size;
  x_.resize(n * h);
  xn_.resize(n * h);
  qkv_.resize(n * (q_dim + 2 * kv_dim));
  attn_.resize(n * q_dim);
  gate_up_.resize(n * 2 * inter);
  act_.resize(n * inter);
  tmp_.resize(n * h);
  positions_.resize(n);
  chunk_of_.resize(n);
  for (size_t ci = 0; ci < batch.seqs.size(); ++ci) {
    const SeqChunk& s = batch.seqs[ci];
    for (int32_t i = 0; i < s.num_tokens; ++i) {
      positions_[s.token_begin + i] = s.start_position + i;
      chunk_of_[s.token_begin + i] = static_cast<int32_t>(ci);
    }
  }
  for (size_t t = 0; t < n; ++t) {
    std::memcpy(&x_[t * h], &weights_.embedding[static_cast<size_t>(batch.token_ids[t]) * h],
                h * sizeof(float));
  }
  // The tokens whose logits are wanted: the last logit_tokens of each chunk with need_logits.
  all_tokens_.resize(n);
  for (size_t t = 0; t < n; ++t) all_tokens_[t] = static_cast<int32_t>(t);
  out_tokens_.clear();
  for (const SeqChunk& s : batch.seqs) {
    if (!s.need_logits) continue;
    for (int32_t i = s.num_tokens - s.logit_tokens; i < s.num_tokens; ++i) {
      out_tokens_.push_back(s.token_begin + i);
    }
  }
}

void CpuModel::RopeAndWriteKv(const ForwardBatch& batch, int l, CpuKvCache& kv) {
  const model::ModelConfig& c = config_;
  const CpuLayerWeights& w = weights_.layers[l];
  const size_t q_dim = c.q_dim(), kv_dim = c.kv_dim(), qkv_dim = q_dim + 2 * kv_dim;
  const size_t half = c.head_dim / 2;
  const float eps = static_cast<float>(c.rms_norm_eps);
  std::vector<float> cos(half), sin(half);
  for (const SeqChunk& s : batch.seqs) {
    for (int32_t i = 0; i < s.num_tokens; ++i) {
      const size_t t = s.token_begin + i;
      const int32_t pos = positions_[t];
      RopeCosSin(inv_freq_.data(), half, pos, cos.data(), sin.data(), rope_scale_);
      float* row = &qkv_[t * qkv_dim];
      if (c.qk_norm) {  // each head's q and k normalised before RoPE (in place: RmsNorm allows it)
        RmsNorm(row, w.q_norm.data(), row, c.num_heads, c.head_dim, eps);
        RmsNorm(row + q_dim, w.k_norm.data(), row + q_dim, c.num_kv_heads, c.head_dim, eps);
      }
      for (int hd = 0; hd < c.num_heads; ++hd) {
        ApplyRope(row + hd * c.head_dim, cos.data(), sin.data(), c.head_dim);
      }
      const int32_t block = s.block_table[pos / kv.block_tokens()];
      const int32_t slot = pos % kv.block_tokens();
      for (int kh = 0; kh < c.num_kv_heads; ++kh) {
        float* k = row + q_dim + kh * c.head_dim;
        float* v = row + q_dim + kv_dim + kh * c.head_dim;
        ApplyRope(k, cos.data(), sin.data(), c.head_dim);
        if (kv_.fp8()) {
          // What an FP8 cache holds: each value through E4M3 with the layer's scale.
          for (int d = 0; d < c.head_dim; ++d) {
            k[d] = Fp8RoundTrip(k[d], kv_.k_scale[l]);
            v[d] = Fp8RoundTrip(v[d], kv_.v_scale[l]);
          }
        }
        float* keys_t = kv.Key(l, block, kh);
        for (int d = 0; d < c.head_dim; ++d) keys_t[d * kv.block_tokens() + slot] = k[d];
        std::memcpy(kv.Value(l, block, kh) + slot * c.head_dim, v, c.head_dim * sizeof(float));
      }
    }
  }
}

void CpuModel::FinishLayer(int l, size_t rows) {
  const CpuLayerWeights& w = weights_.layers[l];
  const size_t h = config_.hidden_size, inter = config_.intermediate_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  RunLinear(attn_.data(), w.o, tmp_.data(), rows, pool_, quantized_);
  for (size_t i = 0; i < rows * h; ++i) x_[i] += tmp_[i];
  RmsNorm(x_.data(), w.post_norm.data(), xn_.data(), rows, h, eps);
  RunLinear(xn_.data(), w.gate_up, gate_up_.data(), rows, pool_, quantized_);
  SiluMul(gate_up_.data(), act_.data(), rows, inter);
  RunLinear(act_.data(), w.down, tmp_.data(), rows, pool_, quantized_);
  for (size_t i = 0; i < rows * h; ++i) x_[i] += tmp_[i];
}

absl::Status CpuModel::Forward(const ForwardBatch& batch, CpuKvCache& kv,
                               std::vector<float>& logits) {
  if (absl::Status st = Validate(batch, kv); !st.ok()) return st;
  const model::ModelConfig& c = config_;
  const size_t n = batch.token_ids.size();
  const size_t h = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  PrepareBatch(batch);
  size_t rows = n;  // the rows of x_ still computed: all of them, until the last layer's attention
  for (int l = 0; l < c.num_layers; ++l) {
    const CpuLayerWeights& w = weights_.layers[l];
    RmsNorm(x_.data(), w.input_norm.data(), xn_.data(), n, h, eps);
    RunLinear(xn_.data(), w.qkv, qkv_.data(), n, pool_, quantized_);
    RopeAndWriteKv(batch, l, kv);
    if (l + 1 < c.num_layers || out_tokens_.size() == n) {
      Attention(batch, l, kv, all_tokens_);
    } else {
      // The last layer: every token's K and V are in the cache; only the tokens whose logits are
      // wanted go on, their rows of x_ moved to the front (a row only ever moves up).
      rows = out_tokens_.size();
      if (rows == 0) break;
      Attention(batch, l, kv, out_tokens_);
      for (size_t j = 0; j < rows; ++j) {
        std::memmove(&x_[j * h], &x_[static_cast<size_t>(out_tokens_[j]) * h], h * sizeof(float));
      }
    }
    FinishLayer(l, rows);
  }
  // Final norm and the head, for the rows that need logits (the first `rows` of x_ now, in
  // chunk order, unless the batch had only such rows).
  const size_t num_out = out_tokens_.size();
  for (size_t j = 0; j < num_out; ++j) {
    const size_t row = rows == num_out ? j : static_cast<size_t>(out_tokens_[j]);
    RmsNorm(&x_[row * h], weights_.final_norm.data(), &xn_[j * h], 1, h, eps);
  }
  logits.resize(num_out * c.vocab_size);
  RunLinear(xn_.data(), weights_.head, logits.data(), num_out, pool_, quantized_);
  return absl::OkStatus();
}

void CpuModel::Attention(const ForwardBatch& batch, int layer, CpuKvCache& kv,
                         std::span<const int32_t> tokens) {
  const model::ModelConfig& c = config_;
  const size_t q_dim = c.q_dim(), qkv_dim = q_dim + 2 * c.kv_dim();
  const int group = c.num_heads / c.num_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const int32_t bt = kv.block_tokens();
  // A work item is (token, KV head) with the query heads sharing that KV head, so each block's
  // keys and values are found (and cached) once per group; when that leaves fewer items than
  // threads (a few sequences, few KV heads), an item is (token, query head). Either way every
  // score and output element is the same chain of operations.
  const size_t n = tokens.size();
  const int per_item =
      pool_ != nullptr && n * c.num_kv_heads < static_cast<size_t>(2 * pool_->num_threads())
          ? 1
          : group;
  const int items_per_token = c.num_heads / per_item;
  auto work = [&](size_t begin, size_t end) {
    std::vector<float> scores;  // [per_item][span]: positions from the first block's start
    for (size_t item = begin; item < end; ++item) {
      const size_t row = item / items_per_token;
      const size_t t = static_cast<size_t>(tokens[row]);
      const int head0 = static_cast<int>(item % items_per_token) * per_item;
      const int kv_head = head0 / group;
      const SeqChunk& s = batch.seqs[chunk_of_[t]];
      const int32_t pos = positions_[t];
      const int32_t first = c.sliding_window > 0 ? std::max(0, pos - c.sliding_window + 1) : 0;
      const int32_t b0 = first / bt, b1 = pos / bt;
      const size_t span = static_cast<size_t>(b1 - b0 + 1) * bt;
      scores.resize(per_item * span);
      const float* q = &qkv_[t * qkv_dim + static_cast<size_t>(head0) * c.head_dim];
      for (int32_t b = b0; b <= b1; ++b) {
        const float* keys = kv.Key(layer, s.block_table[b], kv_head);
        const int32_t valid = std::min(pos + 1, (b + 1) * bt) - b * bt;
        for (int g = 0; g < per_item; ++g) {
          BlockScores(q + g * c.head_dim, keys, c.head_dim, bt, valid, scale,
                      &scores[g * span + static_cast<size_t>(b - b0) * bt]);
        }
      }
      const size_t lo0 = first - b0 * bt, len = pos - first + 1;
      for (int g = 0; g < per_item; ++g) SoftmaxInPlace(&scores[g * span + lo0], len);
      float* out = &attn_[row * q_dim + static_cast<size_t>(head0) * c.head_dim];
      std::fill(out, out + per_item * c.head_dim, 0.0f);
      for (int32_t b = b0; b <= b1; ++b) {
        const int32_t lo = std::max(first, b * bt), hi = std::min(pos + 1, (b + 1) * bt);
        const float* values =
            kv.Value(layer, s.block_table[b], kv_head) + (lo - b * bt) * c.head_dim;
        for (int g = 0; g < per_item; ++g) {
          AccumulateValues(&scores[g * span + (lo - b0 * bt)], values, hi - lo, c.head_dim,
                           out + g * c.head_dim);
        }
      }
    }
  };
  const size_t items = n * items_per_token;
  // Split only when there is enough work to pay for waking the threads.
  size_t context_tokens = 0;
  for (const int32_t t : tokens) context_tokens += positions_[t] + 1;
  const size_t work_per_item = std::max<size_t>(1, context_tokens * c.head_dim * 2 * per_item / n);
  const size_t min_chunk = std::max<size_t>(1, 256 * 1024 / work_per_item);
  if (pool_ == nullptr || items <= min_chunk) {
    work(0, items);
  } else {
    pool_->ParallelFor(items, min_chunk, work);
  }
}

}  // namespace llm::runner
