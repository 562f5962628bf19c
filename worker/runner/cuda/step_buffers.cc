#include "worker/runner/cuda/step_buffers.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/prefill_attention.h"
#include "kernels/gemm/weight.h"
#include "kernels/speculative/history_write.h"
#include "kernels/step/slot_update.h"
#include "worker/constraint/constraint.h"
#include "worker/runner/cpu_ops.h"
#include "worker/runner/cuda/step_layout.h"

namespace llm::runner::cuda {
namespace {

constexpr size_t kAlign = 256;

int32_t RoundUp(int32_t x, int32_t m) { return (x + m - 1) / m * m; }
size_t RoundUp(size_t x, size_t m) { return (x + m - 1) / m * m; }

// Carves aligned arrays out of one allocation; with a null base it only measures.
class Carver {
 public:
  explicit Carver(std::byte* base) : base_(base) {}
  template <typename T>
  T* Take(size_t n) {
    used_ = RoundUp(used_, kAlign);
    T* p = base_ == nullptr ? nullptr : reinterpret_cast<T*>(base_ + used_);
    used_ += n * sizeof(T);
    return p;
  }
  size_t used() const { return used_; }

 private:
  std::byte* base_;
  size_t used_ = 0;
};

// Points `b`'s arrays into `k`'s allocation; returns the bytes of the slot table (first).
size_t Carve(const model::ModelConfig& c, const StepSizes& z, Carver& k, StepBuffers& b) {
  const size_t S = z.engine.max_slots, V = c.vocab_size, H = c.hidden_size;
  const size_t R = z.max_rows, SR = z.max_sample_rows, D = c.head_dim;
  const size_t half = D / 2;
  // A forward pass alone (a draft model's) reads another slot table and never samples.
  const bool all = !z.forward_only;
  b.slots.last_token = k.Take<int32_t>(S);
  b.slots.pos = k.Take<int32_t>(S);
  b.slots.generated = k.Take<int32_t>(S);
  b.slots.done = k.Take<uint8_t>(S);
  b.sampling_table = k.Take<kernels::SlotSampling>(S);
  b.slots.sampling = b.sampling_table;
  b.slots.out_counts = k.Take<uint16_t>(all ? S * V : 0);
  b.slots.prompt_mask = k.Take<uint8_t>(all ? S * V : 0);
  b.block_tables = k.Take<int32_t>(S * z.max_blocks_per_seq);
  b.decode_list = k.Take<int32_t>(S);
  // Zeroed with the slot table: the decode attention's arrival counters must start at zero.
  b.split_arrivals = k.Take<int32_t>(static_cast<size_t>(z.max_decode_rows) * c.num_kv_heads);
  if (z.spec_group > 1) {
    b.slots.history_from = k.Take<int32_t>(S);
    b.slots.num_proposals = k.Take<int32_t>(S);
  }
  const size_t slot_table_end = k.used();
  if (z.spec_group > 1) {
    b.slots.history = k.Take<int32_t>(all ? S * static_cast<size_t>(z.max_context) : 0);
    b.slots.history_stride = z.max_context;
    b.slots.max_proposals = z.spec_group - 1;
    b.slots.proposals = k.Take<int32_t>(S * static_cast<size_t>(b.slots.max_proposals));
    b.row_offset = k.Take<int32_t>(R);
    b.sample_offset = k.Take<int32_t>(SR);
  }
  b.rope_cos = k.Take<float>(static_cast<size_t>(z.max_context) * half);
  b.rope_sin = k.Take<float>(static_cast<size_t>(z.max_context) * half);
  b.x = k.Take<float>(R * H);
  b.delta = k.Take<float>(R * H);
  b.xn = k.Take<bf16>(R * H);
  b.qkv = k.Take<bf16>(R * z.qkv_dim);
  b.attn = k.Take<bf16>(R * c.q_dim());
  b.gate_up = k.Take<bf16>(R * 2 * c.intermediate_size);
  b.act = k.Take<bf16>(R * c.intermediate_size);
  b.row_token = k.Take<int32_t>(R);
  b.row_pos = k.Take<int32_t>(R);
  b.row_slot = k.Take<int32_t>(R);
  b.sample_slot = k.Take<int32_t>(SR);
  b.sample_pos = k.Take<int32_t>(SR);
  b.x_sampled = k.Take<float>(SR * H);
  b.attn_sampled = k.Take<bf16>(SR * c.q_dim());
  b.xs = k.Take<bf16>(SR * H);
  b.logits = k.Take<float>(SR * V);
  b.probs = k.Take<float>(all ? SR * V : 0);
  b.out = k.Take<kernels::SampleOutput>(SR);
  b.sample_work = k.Take<kernels::SampleRowWork>(all ? SR : 0);
  const size_t parts = static_cast<size_t>(z.split_parts) * c.num_heads;
  b.part_out = k.Take<float>(parts * D);
  b.part_max = k.Take<float>(parts);
  b.part_sum = k.Take<float>(parts);
  b.upload = k.Take<std::byte>(all ? z.upload_bytes : 0);
  b.mask_upload = k.Take<std::byte>(all ? z.mask_bytes() : 0);
  if (z.fp8_max_in > 0) {
    b.xq = k.Take<uint8_t>(R * z.fp8_max_in);
    b.xq_scale = k.Take<float>(R * kernels::Fp8Blocks(z.fp8_max_in));
  }
  return slot_table_end;
}

}  // namespace

int32_t DecodeSplitsFor(const StepSizes& z, int32_t rows) {
  if (z.batch_invariant) return std::max(1, std::min(kInvariantSplits, z.max_splits));
  return kernels::DecodeSplits(rows, z.num_kv_heads, z.sm_count, z.max_splits);
}

StepSizes PlanStepSizes(const model::ModelConfig& c, const engine::EngineSizes& sizes,
                        int32_t max_context, int32_t max_prefill_tokens, int32_t sm_count,
                        bool batch_invariant, bool fp8, int32_t spec_group) {
  StepSizes z;
  z.engine = sizes;
  z.max_context = max_context;
  z.max_prefill_tokens = max_prefill_tokens;
  const int32_t S = sizes.max_slots;
  z.spec_group = std::max(1, spec_group);
  z.max_decode_rows =
      z.spec_group > 1 ? std::max(S, std::min(S * z.spec_group, kMaxSpeculativeRows)) : S;
  z.max_history_tokens = z.spec_group > 1 ? max_context * std::min(S, kHistorySpanContexts) : 0;
  z.max_blocks_per_seq = (max_context + sizes.block_tokens - 1) / sizes.block_tokens;
  z.max_rows = RoundUp(max_prefill_tokens + z.max_decode_rows, kPrefillRowAlign);
  // Every decode row samples, and each prompt the step completes (one a slot).
  z.max_sample_rows = RoundUp(z.max_decode_rows + std::min(S, max_prefill_tokens), kSampleRowAlign);
  // Split-K decode attention: at most 64 chunks of at least kAttentionChunkKeys keys; the workspace
  // for the decode batch size that needs the most (row, chunk) pairs.
  z.sm_count = sm_count;
  z.num_kv_heads = c.num_kv_heads;
  z.max_splits =
      std::min(64, (max_context + kernels::kAttentionChunkKeys - 1) / kernels::kAttentionChunkKeys);
  z.batch_invariant = batch_invariant;
  for (int32_t rows = 1; rows <= z.max_decode_rows; ++rows) {
    z.split_parts = std::max<int64_t>(z.split_parts, int64_t{rows} * DecodeSplitsFor(z, rows));
  }
  z.max_prefill_tiles =
      kernels::MaxPrefillTiles(max_prefill_tokens, S, c.num_heads / std::max(1, c.num_kv_heads));
  z.qkv_dim = c.q_dim() + 2 * c.kv_dim();
  if (fp8) z.fp8_max_in = std::max({c.hidden_size, c.q_dim(), c.intermediate_size});
  z.mask_words = static_cast<int32_t>(constraint::MaskWords(c.vocab_size));
  z.max_masks = S;  // the runner widens it for speculation under masks
  // Admissions, block grants (at most one a slot), their block lists (at most a table a slot
  // between them), decode row changes, prefill rows, prompt chunks and their
  // attention tiles (all, and the last layer's: at most two a chunk), sampling rows and the
  // decoding slots' proposal allowances and block limits, and the history spans (two a slot)
  // and their tokens of one step, each array 16-byte aligned.
  const size_t s = static_cast<size_t>(S), r = static_cast<size_t>(z.max_rows);
  z.upload_bytes =
      s * (sizeof(kernels::SlotAdmit) + sizeof(kernels::SlotSampling) +
           sizeof(kernels::SlotGrant)) +
      s * static_cast<size_t>(z.max_blocks_per_seq) * 4 + 2 * s * 2 * 4 + 3 * r * 4 +
      s * sizeof(kernels::PrefillChunk) +
      (static_cast<size_t>(z.max_prefill_tiles) + 2 * s) * sizeof(kernels::PrefillTile) +
      static_cast<size_t>(z.max_sample_rows) * 4 + 2 * s * 4 +
      2 * s * sizeof(kernels::HistorySpan) + static_cast<size_t>(z.max_history_tokens) * 4 +
      18 * 16;
  return z;
}

size_t StepBufferBytes(const model::ModelConfig& c, const StepSizes& z) {
  StepBuffers b;
  Carver measure(nullptr);
  Carve(c, z, measure, b);
  return measure.used();
}

absl::StatusOr<StepBuffers> AllocateStepBuffers(const model::ModelConfig& c, const StepSizes& z,
                                                cudaStream_t stream) {
  StepBuffers b;
  LLM_RETURN_IF_ERROR(b.memory.Allocate(StepBufferBytes(c, z), "runner buffers"));
  Carver carver(b.memory.get());
  const size_t slot_table_bytes = Carve(c, z, carver, b);
  // A clean slot table; every decode row unused.
  // NOTE: on the runner's stream (a non-blocking one, unordered with the default stream), and
  // synchronised below, so the warm-up steps see the cleared table.
  LLM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(b.memory.get(), 0, slot_table_bytes, stream),
                           "slot table");
  LLM_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(b.decode_list, 0xFF, z.engine.max_slots * sizeof(int32_t), stream),
      "slot table");
  if (b.xq != nullptr) {
    const size_t rows = static_cast<size_t>(z.max_rows);
    LLM_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(b.xq, 0, rows * static_cast<size_t>(z.fp8_max_in), stream), "FP8 rows");
    LLM_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(b.xq_scale, 0,
                        rows * static_cast<size_t>(kernels::Fp8Blocks(z.fp8_max_in)) * 4, stream),
        "FP8 rows");
  }

  // RoPE tables: the CPU reference's values.
  const size_t half = static_cast<size_t>(c.head_dim) / 2;
  const std::vector<double> inv_freq = model::RopeInverseFrequencies(c);
  const double rope_scale = model::RopeAttentionFactor(c);
  std::vector<float> cos_t(static_cast<size_t>(z.max_context) * half);
  std::vector<float> sin_t(cos_t.size());
  for (int32_t p = 0; p < z.max_context; ++p) {
    RopeCosSin(inv_freq.data(), half, p, &cos_t[p * half], &sin_t[p * half], rope_scale);
  }
  LLM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(const_cast<float*>(b.rope_cos), cos_t.data(),
                                           cos_t.size() * 4, cudaMemcpyHostToDevice, stream),
                           "RoPE tables");
  LLM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(const_cast<float*>(b.rope_sin), sin_t.data(),
                                           sin_t.size() * 4, cudaMemcpyHostToDevice, stream),
                           "RoPE tables");
  LLM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "runner buffers");
  return b;
}

int64_t KvBytesPerPosition(const model::ModelConfig& c, bool fp8) {
  return int64_t{2} * c.num_layers * c.num_kv_heads * c.head_dim * kernels::KvElementBytes(fp8);
}

absl::StatusOr<KvCache> AllocateKvCache(const model::ModelConfig& c, const model::KvCacheSpec& spec,
                                        int32_t block_tokens, int64_t requested_blocks,
                                        double memory_fraction, int64_t max_useful_blocks,
                                        size_t weight_bytes) {
  const bool fp8 = spec.fp8();
  const auto layers = static_cast<size_t>(c.num_layers);
  if (fp8 && (spec.k_scale.size() != layers || spec.v_scale.size() != layers)) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache: an FP8 cache needs one K and one V "
                     "scale per layer (",
                     c.num_layers, "), not ", spec.k_scale.size(), " and ", spec.v_scale.size()));
  }
  const size_t block_bytes = static_cast<size_t>(KvBytesPerPosition(c, fp8)) * block_tokens;
  const size_t per_layer_block = block_bytes / (2 * layers);
  int64_t blocks = requested_blocks;
  size_t free_bytes = 0, total_bytes = 0;
  LLM_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  if (blocks <= 0) {
    blocks = static_cast<int64_t>(static_cast<double>(free_bytes) * memory_fraction /
                                  static_cast<double>(block_bytes));
  }
  blocks = std::min<int64_t>(blocks, max_useful_blocks);
  blocks = std::min<int64_t>(blocks, INT32_MAX / 2);
  if (blocks < 1) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV cache: ", free_bytes >> 20, " MiB free on the device after the weights (",
                     weight_bytes >> 20, " MiB) is not enough for one block of ", block_bytes >> 10,
                     " KiB at engine.kv_memory_fraction ", memory_fraction));
  }
  KvCache kv;
  LLM_RETURN_IF_ERROR(kv.memory.Allocate(static_cast<size_t>(blocks) * block_bytes, "KV cache"));
  // On the legacy stream, which the runner's non-blocking stream does not wait for: synchronise.
  LLM_CUDA_RETURN_IF_ERROR(
      cudaMemset(kv.memory.get(), 0, static_cast<size_t>(blocks) * block_bytes),
      "KV cache zeroing");
  LLM_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize(), "KV cache zeroing");
  kv.k.resize(layers);
  kv.v.resize(layers);
  kv.format.resize(layers);
  const size_t layer_bytes = static_cast<size_t>(blocks) * per_layer_block;
  for (size_t l = 0; l < layers; ++l) {
    kv.k[l] = kv.memory.get() + (2 * l) * layer_bytes;
    kv.v[l] = kv.memory.get() + (2 * l + 1) * layer_bytes;
    if (fp8) kv.format[l] = {true, spec.k_scale[l], spec.v_scale[l]};
  }
  kv.blocks = static_cast<int32_t>(blocks);
  kv.bytes = static_cast<uint64_t>(blocks) * block_bytes;
  return kv;
}

absl::StatusOr<bool> BuildPrefillTensorMaps(const model::ModelConfig& config, int32_t block_tokens,
                                            int device_major, int device_minor, KvCache& kv) {
  const bool fp8 = !kv.format.empty() && kv.format[0].fp8;
  kv.prefill_maps.clear();
  if (!kernels::HopperPrefillSupported(device_major, device_minor, config.head_dim, block_tokens,
                                       fp8)) {
    return false;
  }
  kv.prefill_maps.resize(kv.k.size());
  cudaError_t err = cudaSuccess;
  for (size_t l = 0; l < kv.k.size() && err == cudaSuccess; ++l) {
    err = kernels::MakePrefillTensorMaps(kv.k[l], kv.v[l], kv.blocks, config.num_kv_heads,
                                         block_tokens, config.head_dim, &kv.prefill_maps[l]);
  }
  if (err != cudaSuccess) {  // an old driver, or a cache past 32-bit rows: the tiled kernel
    kv.prefill_maps.clear();
    return false;
  }
  LLM_CUDA_RETURN_IF_ERROR(kernels::PrepareHopperPrefillAttention(config.head_dim),
                           "Hopper prefill attention");
  return true;
}

}  // namespace llm::runner::cuda
