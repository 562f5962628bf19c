// The CUDA runner's device memory, planned once at start: the sizes a step may reach
// (StepSizes), the one allocation carved into the slot table, the forward pass's scratch, the
// RoPE tables and the upload area (StepBuffers), and the paged KV cache (KvCache). Nothing here
// is allocated in the step loop.
#ifndef LLM_WORKER_RUNNER_CUDA_STEP_BUFFERS_H_
#define LLM_WORKER_RUNNER_CUDA_STEP_BUFFERS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/attention/prefill_attention_sm90.h"
#include "kernels/paged_cache.h"
#include "kernels/sampling/sampling.h"
#include "worker/engine/engine_sizes.h"
#include "worker/model/config.h"
#include "worker/model/kv_cache_spec.h"
#include "worker/runner/cuda/cuda_util.h"
#include "worker/runner/cuda/cuda_weights.h"

namespace llm::runner::cuda {

// The largest step the runner takes, and the shapes derived from it.
struct StepSizes {
  engine::EngineSizes engine;      // kv_blocks is settled later, by AllocateKvCache
  int32_t max_context = 0;         // positions per sequence
  int32_t max_prefill_tokens = 0;  // prompt tokens per step
  int32_t max_blocks_per_seq = 0;
  int32_t max_rows = 0;         // batch rows: padded prefill rows + decode rows
  int32_t max_sample_rows = 0;  // sampling rows, padded
  // Speculative decoding: the most rows a decoding slot takes (1 + engine.speculative.
  // num_tokens; 1 without speculation), and the most decode rows a step holds (max_slots, or
  // more with speculation, up to kMaxSpeculativeRows: a step whose verify groups would need
  // more decodes without proposals).
  int32_t spec_group = 1;
  int32_t max_decode_rows = 0;
  // History spans' tokens one step uploads at most (speculative decoding only): a cached
  // prompt's positions, the oracle's continuation (step_layout.h). max_context times
  // kHistorySpanContexts (or max_slots, if fewer).
  int32_t max_history_tokens = 0;
  // Split-K decode attention (DecodeSplitsFor): the device's SMs, the most chunks a row is cut
  // into, and the most (row, chunk) pairs any decode batch size needs in the workspace.
  int32_t sm_count = 0;
  int32_t num_kv_heads = 0;
  int32_t max_splits = 0;
  // Batch-invariant runs cut every row into the same number of chunks whatever the batch size,
  // so a row's attention never depends on what else is in the batch.
  bool batch_invariant = false;
  int64_t split_parts = 0;
  int32_t max_prefill_tiles = 0;  // the prefill attention's blocks per kv head (MaxPrefillTiles)
  int32_t qkv_dim = 0;            // q_dim + 2 * kv_dim
  size_t upload_bytes = 0;        // one step's upload (admissions, rows, sampling rows)
  // FP8 products: the widest input an FP8 product's E4M3 rows hold (0: no FP8 products).
  int32_t fp8_max_in = 0;
  // Buffers for a forward pass alone (the draft model, cuda_draft.h): its slot table's output
  // counts, prompt mask and history, the sampler's probabilities and workspace, the upload and
  // the masks take no memory (the draft points at the target's slot table and upload).
  bool forward_only = false;
  // Structured output: a token mask's 64-bit words. StepBuffers::mask_upload holds the mask
  // index of each sampling row, then the masks: at most one a slot, or with speculative
  // decoding one a verify row (engine.cuda_speculate_constrained), within the sampling rows.
  int32_t mask_words = 0;
  int32_t max_masks = 0;
  size_t masks_offset() const { return (static_cast<size_t>(max_sample_rows) * 4 + 15) / 16 * 16; }
  size_t mask_bytes() const {
    return masks_offset() + static_cast<size_t>(max_masks) * static_cast<size_t>(mask_words) * 8;
  }
};

// `fp8`: the layers' products are FP8 (buffers for their quantised inputs). `spec_group` > 1:
// speculative decoding with up to spec_group - 1 proposals a slot.
inline constexpr int32_t kMaxSpeculativeRows = 512;
inline constexpr int32_t kHistorySpanContexts = 8;
StepSizes PlanStepSizes(const model::ModelConfig& config, const engine::EngineSizes& sizes,
                        int32_t max_context, int32_t max_prefill_tokens, int32_t sm_count,
                        bool batch_invariant, bool fp8 = false, int32_t spec_group = 1);

// Chunks per row of a decode launch of `rows` rows: kernels::DecodeSplits, or with
// batch_invariant a fixed kInvariantSplits (at most max_splits).
inline constexpr int32_t kInvariantSplits = 8;
int32_t DecodeSplitsFor(const StepSizes& sizes, int32_t rows);

// Device pointers into one allocation. Rows are batch rows, sample rows sampling rows.
struct StepBuffers {
  DeviceMemory memory;
  // The slot table (device-resident request state; zeroed at start).
  kernels::DeviceSlots slots{};
  kernels::SlotSampling* sampling_table = nullptr;
  int32_t* block_tables = nullptr;  // [max_slots, max_blocks_per_seq]
  int32_t* decode_list = nullptr;   // [max_slots] slot of each decoding slot's rows, -1 unused
  // RoPE tables [max_context, head_dim / 2], the CPU reference's values.
  const float* rope_cos = nullptr;
  const float* rope_sin = nullptr;
  // The forward pass's scratch.
  float* x = nullptr;       // [rows, hidden] residual stream
  float* delta = nullptr;   // [rows, hidden] sublayer output
  bf16* xn = nullptr;       // [rows, hidden]
  bf16* qkv = nullptr;      // [rows, qkv_dim]
  bf16* attn = nullptr;     // [rows, q_dim]
  bf16* gate_up = nullptr;  // [rows, 2 * intermediate]
  bf16* act = nullptr;      // [rows, intermediate]
  int32_t* row_token = nullptr;
  int32_t* row_pos = nullptr;
  int32_t* row_slot = nullptr;
  int32_t* sample_slot = nullptr;
  int32_t* sample_pos = nullptr;
  // Speculative decoding (null without): each row's and sampling row's offset in its verify
  // group. The slot table's history and proposals are in `slots`.
  int32_t* row_offset = nullptr;
  int32_t* sample_offset = nullptr;
  // The last layer of a step with prompt rows runs on the sampling rows alone, gathered here.
  float* x_sampled = nullptr;    // [sample rows, hidden]
  bf16* attn_sampled = nullptr;  // [sample rows, q_dim]
  bf16* xs = nullptr;            // [sample rows, hidden]
  float* logits = nullptr;       // [sample rows, vocab]
  float* probs = nullptr;        // [sample rows, vocab]
  kernels::SampleOutput* out = nullptr;
  kernels::SampleRowWork* sample_work = nullptr;  // [sample rows] the sampler's workspace
  float* part_out = nullptr;                      // split-K attention partials
  float* part_max = nullptr;
  float* part_sum = nullptr;
  int32_t* split_arrivals =
      nullptr;  // [max decode rows, KV heads] decode attention's, zero between steps
  std::byte* upload = nullptr;  // [upload_bytes], a step's uploaded arrays
  // The constrained rows' masks (kernels::SampleParams), uploaded by the steps that have them
  // (StepSizes::mask_bytes).
  std::byte* mask_upload = nullptr;
  // An FP8 product's input on cuBLASLt: E4M3 rows and their scales (kernels/gemm/weight.h), made
  // by the kernel before it and read by the product; zeroed at start, so the rows a product pads
  // to (Fp8GemmRows) are finite. Null without FP8 products.
  uint8_t* xq = nullptr;      // [rows, fp8_max_in]
  float* xq_scale = nullptr;  // [ceil(fp8_max_in / 128), rows]
};

// The bytes AllocateStepBuffers allocates for `sizes`.
size_t StepBufferBytes(const model::ModelConfig& config, const StepSizes& sizes);

// Allocates the buffers on the current device, clears the slot table (every decode row unused)
// and writes the RoPE tables, on `stream`, then synchronises it.
absl::StatusOr<StepBuffers> AllocateStepBuffers(const model::ModelConfig& config,
                                                const StepSizes& sizes, cudaStream_t stream);

// The paged KV cache: per layer K and V, [blocks][kv_heads][block_tokens][head_dim], bf16 or
// E4M3 with the layer's scales (kernels/paged_cache.h).
struct KvCache {
  DeviceMemory memory;
  std::vector<void*> k, v;                     // per layer
  std::vector<kernels::KvCacheFormat> format;  // per layer
  // Per layer, the Hopper prefill kernel's tensor maps of k and v (BuildPrefillTensorMaps);
  // empty: the tiled kernel.
  std::vector<kernels::PrefillTensorMaps> prefill_maps;
  int32_t blocks = 0;
  uint64_t bytes = 0;
};

// Bytes of K and V one cached position takes over all layers (an element is one byte in an FP8
// cache, two in bf16).
int64_t KvBytesPerPosition(const model::ModelConfig& config, bool fp8);

// A cache of `spec`'s dtype (an FP8 one holds twice the blocks in the same bytes), zeroed: every
// element is finite before its first write (the Hopper prefill kernel copies whole blocks, and
// multiplies the unwritten rows of a sequence's last block by a zero weight).
// `requested_blocks` > 0: that many; else `memory_fraction` of the device memory free now.
// Capped at `max_useful_blocks`. RESOURCE_EXHAUSTED (naming engine.kv_memory_fraction and the
// weights' size, `weight_bytes`) when not even one block fits; INVALID_ARGUMENT when an FP8
// spec has not one K and one V scale a layer.
absl::StatusOr<KvCache> AllocateKvCache(const model::ModelConfig& config,
                                        const model::KvCacheSpec& spec, int32_t block_tokens,
                                        int64_t requested_blocks, double memory_fraction,
                                        int64_t max_useful_blocks, size_t weight_bytes);

// Fills kv.prefill_maps for a device of compute capability major.minor when the Hopper prefill
// kernel supports the shape (kernels::HopperPrefillSupported) and allows the kernel its shared
// memory; returns whether it did (false leaves them empty: the tiled kernel, also when the
// driver cannot make the maps).
absl::StatusOr<bool> BuildPrefillTensorMaps(const model::ModelConfig& config, int32_t block_tokens,
                                            int device_major, int device_minor, KvCache& kv);

}  // namespace llm::runner::cuda

#endif  // LLM_WORKER_RUNNER_CUDA_STEP_BUFFERS_H_
