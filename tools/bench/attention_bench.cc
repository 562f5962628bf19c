// llm-bench attention: the decode attention kernels alone (or, with --prefill, the prefill
// attention kernel alone: time and TFLOP/s per prompt length; RunPrefillShape).
// Decode: the decode attention kernels alone (kernels/attention/attention.h) on one
// device, without a model or a runner: for each model shape's heads, each batch and each context,
// both kernels (tensor cores and CUDA cores) on a paged cache of random bf16 (or, with
// --kv-cache-dtype fp8, E4M3 bytes of one repeated value: the kernels' work does not depend on
// the values) with the chunk split
// the runner would use (DecodeSplits), the device time per launch (mean of --launches, after a
// warm-up) and the K/V bandwidth it reaches — K and V bytes read per second, and that over the
// device-to-device copy bandwidth — the figure issue 12 starts from ("decode attention reads
// K/V at about a third of the bandwidth"). Blocks of a row are scattered over the cache as a
// serving cache's are.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "tools/bench/bench_util.h"
#include "tools/bench/commands.h"

#ifdef LLM_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/attention/attention.h"
#include "kernels/attention/prefill_attention.h"
#include "kernels/attention/prefill_attention_sm90.h"
#include "kernels/device.h"
#include "kernels/weights/random_init.h"
#include "tools/bench/device_bandwidth.h"
#include "worker/model/shapes.h"
#include "worker/runner/cuda/cuda_util.h"
#endif

namespace llm::bench {

#ifndef LLM_HAVE_CUDA

int RunAttentionBench(const std::vector<std::string>&) {
  std::fprintf(stderr, "llm-bench attention: this build has no CUDA (LLM_ENABLE_CUDA=OFF)\n");
  return 1;
}

#else

namespace {

template <typename T>
T* As(const runner::cuda::DeviceMemory& m) {
  return reinterpret_cast<T*>(m.get());
}

// K and V (random bf16, or E4M3 bytes of one value: the kernels' work does not depend on the
// values) and q/k/v rows of random bf16.
absl::Status InitRandomCache(const runner::cuda::DeviceMemory& k,
                             const runner::cuda::DeviceMemory& v,
                             const runner::cuda::DeviceMemory& qkv, int64_t cache_elems,
                             int64_t qkv_elems, bool fp8) {
  if (fp8) {
    LLM_CUDA_RETURN_IF_ERROR(cudaMemset(k.get(), 0x2D, k.bytes()), "init K");  // 0.15625
    LLM_CUDA_RETURN_IF_ERROR(cudaMemset(v.get(), 0xAB, v.bytes()), "init V");  // -0.046875
  } else {
    LLM_CUDA_RETURN_IF_ERROR(
        kernels::LaunchRandomInit({As<__nv_bfloat16>(k), nullptr, cache_elems, 1, 1.0f, 0.0f},
                                  nullptr),
        "init K");
    LLM_CUDA_RETURN_IF_ERROR(
        kernels::LaunchRandomInit({As<__nv_bfloat16>(v), nullptr, cache_elems, 2, 1.0f, 0.0f},
                                  nullptr),
        "init V");
  }
  LLM_CUDA_RETURN_IF_ERROR(
      kernels::LaunchRandomInit({As<__nv_bfloat16>(qkv), nullptr, qkv_elems, 3, 1.0f, 0.0f},
                                nullptr),
      "init q");
  return absl::OkStatus();
}

// The mean device time of `launches` calls of `launch` (a cudaError_t), after 3 for warm-up.
template <typename Launch>
absl::StatusOr<double> TimeLaunches(int32_t launches, runner::cuda::Event& start,
                                    runner::cuda::Event& stop, Launch launch) {
  for (int i = 0; i < 3; ++i) LLM_CUDA_RETURN_IF_ERROR(launch(), "warm-up launch");
  LLM_CUDA_RETURN_IF_ERROR(cudaEventRecord(start.get()), "event");
  for (int i = 0; i < launches; ++i) LLM_CUDA_RETURN_IF_ERROR(launch(), "launch");
  LLM_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop.get()), "event");
  LLM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop.get()), "timed launches");
  return runner::cuda::ElapsedSeconds(start, stop) / launches;
}

// The decode attention's device buffers for up to `rows` rows of `max_blocks` blocks each.
struct DecodeBuffers {
  static constexpr int32_t kBlockTokens = 16, kMaxSplits = 64;
  runner::cuda::DeviceMemory k, v, qkv, out, part_out, part_max, part_sum, arrivals, tables,
      row_pos, row_slot;
  int32_t max_rows = 0, max_blocks = 0;
};

// Allocates `b` for `config`'s heads, with a random cache and q/k/v; block j of row r is block
// j * max_rows + r (a row's blocks far apart), and row r is slot r.
absl::Status AllocateDecode(const model::ModelConfig& config, int32_t max_rows, int32_t max_context,
                            bool fp8, DecodeBuffers& b) {
  const int64_t H = config.num_heads, KV = config.num_kv_heads, D = config.head_dim;
  b.max_rows = max_rows;
  b.max_blocks = (max_context + DecodeBuffers::kBlockTokens - 1) / DecodeBuffers::kBlockTokens;
  const int64_t blocks = int64_t{max_rows} * b.max_blocks;
  const int64_t cache_elems = blocks * KV * DecodeBuffers::kBlockTokens * D;
  const int64_t qkv_elems = max_rows * (H + 2 * KV) * D;
  const int64_t parts = max_rows * H * DecodeBuffers::kMaxSplits;
  constexpr size_t kBf16 = sizeof(__nv_bfloat16), kF32 = sizeof(float), kI32 = sizeof(int32_t);
  const size_t cache_bytes = fp8 ? 1 : kBf16;  // a cached element's
  LLM_RETURN_IF_ERROR(b.k.Allocate(cache_elems * cache_bytes, "K cache"));
  LLM_RETURN_IF_ERROR(b.v.Allocate(cache_elems * cache_bytes, "V cache"));
  LLM_RETURN_IF_ERROR(b.qkv.Allocate(qkv_elems * kBf16, "q/k/v"));
  LLM_RETURN_IF_ERROR(b.out.Allocate(max_rows * H * D * kBf16, "output"));
  LLM_RETURN_IF_ERROR(b.part_out.Allocate(parts * D * kF32, "partial outputs"));
  LLM_RETURN_IF_ERROR(b.part_max.Allocate(parts * kF32, "partial maxima"));
  LLM_RETURN_IF_ERROR(b.part_sum.Allocate(parts * kF32, "partial sums"));
  LLM_RETURN_IF_ERROR(b.arrivals.Allocate(max_rows * KV * kI32, "arrival counters"));
  LLM_RETURN_IF_ERROR(b.tables.Allocate(blocks * kI32, "block tables"));
  LLM_RETURN_IF_ERROR(b.row_pos.Allocate(max_rows * kI32, "positions"));
  LLM_RETURN_IF_ERROR(b.row_slot.Allocate(max_rows * kI32, "slots"));
  LLM_RETURN_IF_ERROR(InitRandomCache(b.k, b.v, b.qkv, cache_elems, qkv_elems, fp8));
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int32_t r = 0; r < max_rows; ++r) {
    for (int32_t j = 0; j < b.max_blocks; ++j) {
      table[static_cast<size_t>(r) * b.max_blocks + j] = j * max_rows + r;
    }
  }
  std::vector<int32_t> slots(static_cast<size_t>(max_rows));
  for (int32_t r = 0; r < max_rows; ++r) slots[r] = r;
  LLM_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(b.tables.get(), table.data(), table.size() * kI32, cudaMemcpyHostToDevice),
      "block tables");
  LLM_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(b.row_slot.get(), slots.data(), slots.size() * kI32, cudaMemcpyHostToDevice),
      "slots");
  LLM_CUDA_RETURN_IF_ERROR(cudaMemset(b.arrivals.get(), 0, b.arrivals.bytes()), "arrival counters");
  return absl::OkStatus();
}

// The decode attention of `rows` rows over `b`, split for `sm_count` multiprocessors.
kernels::AttentionParams DecodeParams(const model::ModelConfig& config, DecodeBuffers& b,
                                      int32_t rows, int32_t sm_count, bool fp8) {
  kernels::AttentionParams p{};
  p.qkv = As<__nv_bfloat16>(b.qkv);
  p.k_cache = b.k.get();
  p.v_cache = b.v.get();
  p.kv = {fp8, 0.05f, 0.05f};
  p.row_pos = As<int32_t>(b.row_pos);
  p.row_slot = As<int32_t>(b.row_slot);
  p.block_tables = As<int32_t>(b.tables);
  p.max_blocks_per_seq = b.max_blocks;
  p.out = As<__nv_bfloat16>(b.out);
  p.partial_out = As<float>(b.part_out);
  p.partial_max = As<float>(b.part_max);
  p.partial_sum = As<float>(b.part_sum);
  p.split_arrivals = As<int32_t>(b.arrivals);
  p.rows = rows;
  p.num_heads = config.num_heads;
  p.num_kv_heads = config.num_kv_heads;
  p.head_dim = config.head_dim;
  p.block_tokens = DecodeBuffers::kBlockTokens;
  p.splits = kernels::DecodeSplits(rows, config.num_kv_heads, sm_count, DecodeBuffers::kMaxSplits);
  p.scale = 1.0f / std::sqrt(static_cast<float>(config.head_dim));
  return p;
}

// One shape's heads at every (rows, context), both kernels.
absl::Status RunShape(const std::string& shape, const std::vector<int32_t>& row_counts,
                      const std::vector<int32_t>& contexts, int32_t launches, int32_t sm_count,
                      double copy_bandwidth, bool fp8, nlohmann::json& cases) {
  auto config = model::ShapeConfig(shape);
  if (!config.ok()) return config.status();
  const int32_t H = config->num_heads, KV = config->num_kv_heads, D = config->head_dim;
  if (!kernels::AttentionSupported(D, H, KV)) {
    return absl::InvalidArgumentError(absl::StrCat(shape, ": heads not supported"));
  }
  DecodeBuffers b;
  LLM_RETURN_IF_ERROR(AllocateDecode(*config,
                                     *std::max_element(row_counts.begin(), row_counts.end()),
                                     *std::max_element(contexts.begin(), contexts.end()), fp8, b));
  runner::cuda::Event start, stop;
  LLM_RETURN_IF_ERROR(start.Create());
  LLM_RETURN_IF_ERROR(stop.Create());
  for (const int32_t context : contexts) {
    std::vector<int32_t> pos(static_cast<size_t>(b.max_rows), context - 1);
    LLM_CUDA_RETURN_IF_ERROR(cudaMemcpy(b.row_pos.get(), pos.data(), pos.size() * sizeof(int32_t),
                                        cudaMemcpyHostToDevice),
                             "positions");
    for (const int32_t rows : row_counts) {
      for (const bool tensor_cores : {true, false}) {
        kernels::AttentionParams p = DecodeParams(*config, b, rows, sm_count, fp8);
        // A head size without the tensor-core kernel ran the CUDA-core one already.
        if (!tensor_cores && !kernels::AttentionUsesTensorCores(p)) continue;
        p.tensor_cores = tensor_cores;
        LLM_ASSIGN_OR_RETURN(const double seconds, TimeLaunches(launches, start, stop, [&] {
                               return kernels::LaunchAttention(p, nullptr);
                             }));
        const double kv_bytes = 2.0 * rows * context * KV * D * (fp8 ? 1 : 2);
        cases.push_back(
            {{"shape", shape},
             {"heads", H},
             {"kv_heads", KV},
             {"head_dim", D},
             {"rows", rows},
             {"context", context},
             {"splits", p.splits},
             {"used_chunks", kernels::UsedChunks(context - 1, 0, p.splits)},
             {"kernel", kernels::AttentionUsesTensorCores(p) ? "tensor_cores" : "cuda_cores"},
             {"kv_cache", fp8 ? "fp8" : "bf16"},
             {"us", seconds * 1e6},
             {"kv_gb_per_s", kv_bytes / seconds / 1e9},
             {"bandwidth_use", kv_bytes / seconds / copy_bandwidth}});
      }
    }
  }
  return absl::OkStatus();
}

// One sequence's block table, its blocks in reverse order: scattered, as a serving cache's are.
absl::Status UploadReversedTable(const runner::cuda::DeviceMemory& tables, int32_t blocks) {
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int32_t j = 0; j < blocks; ++j) table[static_cast<size_t>(j)] = blocks - 1 - j;
  LLM_CUDA_RETURN_IF_ERROR(cudaMemcpy(tables.get(), table.data(), table.size() * sizeof(int32_t),
                                      cudaMemcpyHostToDevice),
                           "block table");
  return absl::OkStatus();
}

// Query-key pairs the last `tokens` queries of a `prompt`-token prompt see (each up to its own
// position, within the window): each costs QK^T's and PV's head_dim multiply-adds.
double KeysSeen(int32_t prompt, int32_t tokens, int32_t window) {
  double keys = 0;
  for (int32_t pos = prompt - tokens; pos < prompt; ++pos) {
    keys += pos + 1 - kernels::PrefillFirstKey(pos, window);
  }
  return keys;
}

// Which prefill kernels --kernel asks for: the tiled one, the Hopper one, or both.
struct PrefillKernels {
  bool tiled = true;
  bool hopper = true;
  bool hopper_required = false;  // --kernel hopper: an error where it cannot run
};

// The output of the last launch, as floats.
absl::StatusOr<std::vector<float> > DownloadOutput(const kernels::PrefillAttentionParams& p,
                                                   int32_t tokens) {
  std::vector<__nv_bfloat16> bits(static_cast<size_t>(tokens) * p.num_heads * p.head_dim);
  LLM_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(bits.data(), p.out, bits.size() * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost),
      "output");
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = __bfloat162float(bits[i]);
  return out;
}

// Times `p` on each kernel `which` asks for (the Hopper one with `maps`, where not null); one
// case per kernel from `base`. With both, the Hopper case carries its largest difference from
// the tiled kernel's output (a correctness check beside the figure).
absl::Status TimePrefillKernels(kernels::PrefillAttentionParams p,
                                const kernels::PrefillTensorMaps* maps, const PrefillKernels& which,
                                int32_t launches, int32_t tokens, double flops,
                                const nlohmann::json& base, nlohmann::json& cases) {
  runner::cuda::Event start, stop;
  LLM_RETURN_IF_ERROR(start.Create());
  LLM_RETURN_IF_ERROR(stop.Create());
  // Both kernels run: the tiled kernel's output is kept to compare the Hopper one's with.
  const bool compare = which.tiled && which.hopper && maps != nullptr;
  std::vector<float> tiled_out;
  for (const bool hopper : {false, true}) {
    if (hopper ? (maps == nullptr || !which.hopper) : !which.tiled) continue;
    p.tma = hopper ? maps : nullptr;
    LLM_ASSIGN_OR_RETURN(const double seconds, TimeLaunches(launches, start, stop, [&] {
                           return kernels::LaunchPrefillAttention(p, nullptr);
                         }));
    nlohmann::json c = base;
    c["kernel"] = hopper ? "hopper" : "tiled";
    c["us"] = seconds * 1e6;
    c["tflop_per_s"] = flops / seconds / 1e12;
    if (compare) {
      LLM_ASSIGN_OR_RETURN(std::vector<float> out, DownloadOutput(p, tokens));
      if (!hopper) {
        tiled_out = std::move(out);
        cases.push_back(c);
        continue;
      }
      double worst = 0;
      for (size_t i = 0; i < out.size(); ++i) {
        const double d = std::fabs(static_cast<double>(out[i]) - tiled_out[i]);
        worst = std::isnan(d) ? INFINITY : std::max(worst, d);
      }
      c["max_abs_diff_vs_tiled"] = worst;
    }
    cases.push_back(c);
  }
  return absl::OkStatus();
}

// The device buffers of one shape's prefill cases: a paged cache of random bf16 (E4M3 bytes of
// one value with fp8) for the longest prompt, its block table (scattered), q/k/v and the output.
struct PrefillBuffers {
  runner::cuda::DeviceMemory k, v, qkv, out, tables, chunks, tiles;
  int32_t max_blocks = 0;
};

absl::Status AllocatePrefill(int32_t H, int32_t KV, int32_t D, int32_t max_prompt,
                             int32_t block_tokens, bool fp8, PrefillBuffers& b) {
  constexpr size_t kBf16 = sizeof(__nv_bfloat16), kI32 = sizeof(int32_t);
  b.max_blocks = (max_prompt + block_tokens - 1) / block_tokens;
  const int64_t cache_elems = int64_t{b.max_blocks} * KV * block_tokens * D;
  const int64_t qkv_elems = int64_t{max_prompt} * (H + 2 * KV) * D;
  const size_t cache_bytes = fp8 ? 1 : kBf16;
  LLM_RETURN_IF_ERROR(b.k.Allocate(cache_elems * cache_bytes, "K cache"));
  LLM_RETURN_IF_ERROR(b.v.Allocate(cache_elems * cache_bytes, "V cache"));
  LLM_RETURN_IF_ERROR(b.qkv.Allocate(qkv_elems * kBf16, "q/k/v"));
  LLM_RETURN_IF_ERROR(b.out.Allocate(int64_t{max_prompt} * H * D * kBf16, "output"));
  LLM_RETURN_IF_ERROR(b.tables.Allocate(int64_t{b.max_blocks} * kI32, "block table"));
  LLM_RETURN_IF_ERROR(b.chunks.Allocate(sizeof(kernels::PrefillChunk), "chunk"));
  const int32_t max_tiles = kernels::MaxPrefillTiles(max_prompt, 1, H / KV);
  LLM_RETURN_IF_ERROR(b.tiles.Allocate(int64_t{max_tiles} * sizeof(kernels::PrefillTile), "tiles"));
  LLM_RETURN_IF_ERROR(InitRandomCache(b.k, b.v, b.qkv, cache_elems, qkv_elems, fp8));
  return UploadReversedTable(b.tables, b.max_blocks);
}

// The Hopper kernel's maps of `b`'s cache where the device and shape allow it; null otherwise
// (INVALID_ARGUMENT naming --kernel when it was the only kernel asked for).
absl::StatusOr<const kernels::PrefillTensorMaps*> HopperMaps(const model::ModelConfig& config,
                                                             const PrefillBuffers& b,
                                                             int32_t block_tokens, bool fp8,
                                                             const PrefillKernels& which,
                                                             kernels::PrefillTensorMaps& maps) {
  if (!which.hopper) return nullptr;
  int device = 0;
  cudaDeviceProp prop{};
  LLM_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), "device");
  LLM_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device), "device properties");
  if (!kernels::HopperPrefillSupported(prop.major, prop.minor, config.head_dim, block_tokens,
                                       fp8)) {
    if (!which.hopper_required) return nullptr;
    return absl::InvalidArgumentError(absl::StrCat(
        "--kernel hopper: not on this device (compute capability ", prop.major, ".", prop.minor,
        ") with head_dim ", config.head_dim, (fp8 ? " and an fp8 cache" : "")));
  }
  LLM_CUDA_RETURN_IF_ERROR(
      kernels::MakePrefillTensorMaps(b.k.get(), b.v.get(), b.max_blocks, config.num_kv_heads,
                                     block_tokens, config.head_dim, &maps),
      "tensor maps");
  LLM_CUDA_RETURN_IF_ERROR(kernels::PrepareHopperPrefillAttention(config.head_dim),
                           "Hopper prefill attention setup");
  return &maps;
}

// The prefill attention kernels alone (kernels/attention/prefill_attention.h, and
// prefill_attention_sm90.h on an H100/H200) for one model shape's heads: per prompt length, the
// step that computes its last `chunk` tokens (the whole prompt when `chunk` is 0 or longer)
// with the earlier ones cached, one sequence. TFLOP/s counts the two products' multiply-adds
// the causal mask (and the sliding window) leaves, as FlashAttention's figures do.
absl::Status RunPrefillShape(const std::string& shape, const std::vector<int32_t>& prompts,
                             int32_t chunk, int32_t launches, bool fp8, const PrefillKernels& which,
                             nlohmann::json& cases) {
  auto config = model::ShapeConfig(shape);
  if (!config.ok()) return config.status();
  const int32_t H = config->num_heads, KV = config->num_kv_heads, D = config->head_dim;
  if (!kernels::PrefillAttentionSupported(D, H, KV)) {
    return absl::InvalidArgumentError(absl::StrCat(shape, ": heads not supported"));
  }
  LLM_CUDA_RETURN_IF_ERROR(kernels::PreparePrefillAttention(D), "prefill attention setup");
  constexpr int32_t kBlockTokens = 16;
  PrefillBuffers b;
  LLM_RETURN_IF_ERROR(AllocatePrefill(H, KV, D, *std::max_element(prompts.begin(), prompts.end()),
                                      kBlockTokens, fp8, b));
  kernels::PrefillTensorMaps maps;
  LLM_ASSIGN_OR_RETURN(const kernels::PrefillTensorMaps* hopper,
                       HopperMaps(*config, b, kBlockTokens, fp8, which, maps));
  for (const int32_t prompt : prompts) {
    const int32_t tokens = chunk > 0 ? std::min(chunk, prompt) : prompt;
    const std::vector<kernels::PrefillChunk> chunks = {{0, tokens, 0, prompt - tokens}};
    std::vector<kernels::PrefillTile> tiles;
    kernels::PlanPrefillTiles(chunks, H / KV, tiles);
    LLM_CUDA_RETURN_IF_ERROR(cudaMemcpy(b.chunks.get(), chunks.data(),
                                        sizeof(kernels::PrefillChunk), cudaMemcpyHostToDevice),
                             "chunk");
    LLM_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(b.tiles.get(), tiles.data(), tiles.size() * sizeof(kernels::PrefillTile),
                   cudaMemcpyHostToDevice),
        "tiles");
    kernels::PrefillAttentionParams p{};
    p.qkv = As<__nv_bfloat16>(b.qkv);
    p.k_cache = b.k.get();
    p.v_cache = b.v.get();
    p.block_tables = As<int32_t>(b.tables);
    p.max_blocks_per_seq = b.max_blocks;
    p.chunks = As<kernels::PrefillChunk>(b.chunks);
    p.tiles = As<kernels::PrefillTile>(b.tiles);
    p.num_tiles = static_cast<int32_t>(tiles.size());
    p.out = As<__nv_bfloat16>(b.out);
    p.num_heads = H;
    p.num_kv_heads = KV;
    p.head_dim = D;
    p.block_tokens = kBlockTokens;
    p.sliding_window = config->sliding_window;
    p.scale = 1.0f / std::sqrt(static_cast<float>(D));
    p.kv = {fp8, 0.05f, 0.05f};
    const nlohmann::json base = {{"shape", shape},
                                 {"heads", H},
                                 {"kv_heads", KV},
                                 {"head_dim", D},
                                 {"sliding_window", p.sliding_window},
                                 {"prompt", prompt},
                                 {"chunk_tokens", tokens},
                                 {"tiles", tiles.size()},
                                 {"kv_cache", fp8 ? "fp8" : "bf16"}};
    const double flops = 4.0 * KeysSeen(prompt, tokens, p.sliding_window) * H * D;
    LLM_RETURN_IF_ERROR(TimePrefillKernels(p, hopper, which, launches, tokens, flops, base, cases));
  }
  return absl::OkStatus();
}

// --prefill: every shape at every prompt length of --prompts, on the kernels --kernel names.
absl::Status RunPrefill(const FlagSet& flags, const std::vector<std::string>& shapes,
                        int32_t launches, bool fp8, nlohmann::json& cases) {
  const std::vector<int32_t> prompts = ParsePositiveInts(flags.GetString("prompts"));
  auto chunk = flags.GetInt("chunk");
  if (prompts.empty()) return absl::InvalidArgumentError("--prompts: no length");
  if (!chunk.ok() || *chunk < 0 || *chunk > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError("--chunk: a token count, or 0");
  }
  const std::string kernel = flags.GetString("kernel");
  PrefillKernels which;
  if (kernel == "tiled") {
    which.hopper = false;
  } else if (kernel == "hopper") {
    which.tiled = false;
    which.hopper_required = true;
  } else if (kernel != "both") {
    return absl::InvalidArgumentError(
        absl::StrCat("--kernel: '", kernel, "' is not tiled, hopper or both"));
  }
  for (const std::string& shape : shapes) {
    LLM_RETURN_IF_ERROR(
        RunPrefillShape(shape, prompts, static_cast<int32_t>(*chunk), launches, fp8, which, cases));
  }
  return absl::OkStatus();
}

}  // namespace

int RunAttentionBench(const std::vector<std::string>& args) {
  const std::string cmd = "llm-bench attention";
  FlagSet flags;
  flags.Value("device", "CUDA device", "0")
      .Value("shapes", "model shapes whose heads to run, comma-separated",
             "llama-3-8b,llama-3.2-1b,qwen2-0.5b")
      .Value("rows", "decode rows (batch sizes), comma-separated", "1,8,64,256")
      .Value("contexts", "context lengths, comma-separated", "1024,4096")
      .Value("launches", "timed launches per case", "20")
      .Value("kv-cache-dtype", "the cache's elements: bf16 or fp8", "bf16")
      .Bool("prefill", "time the prefill attention kernel instead, per prompt length")
      .Value("prompts", "--prefill: prompt lengths, comma-separated", "1024,4096,8192,16384")
      .Value("chunk",
             "--prefill: time the step of the prompt's last CHUNK tokens, the rest cached (0: "
             "the whole prompt in one step)",
             "0")
      .Value("kernel",
             "--prefill: tiled, hopper (wgmma and TMA, compute capability 9.0) or both (the "
             "Hopper kernel where it can run, with its largest difference from the tiled one)",
             "both");
  if (int rc = ParseOrExit(cmd, flags, args); rc >= 0) return rc;
  auto device = flags.GetInt("device");
  auto launches = flags.GetInt("launches");
  if (!device.ok()) return Fail(cmd, device.status());
  if (!launches.ok()) return Fail(cmd, launches.status());
  const std::vector<int32_t> rows = ParsePositiveInts(flags.GetString("rows"));
  const std::vector<int32_t> contexts = ParsePositiveInts(flags.GetString("contexts"));
  const std::vector<std::string> shapes =
      absl::StrSplit(flags.GetString("shapes"), ',', absl::SkipEmpty());
  if (rows.empty()) return Fail(cmd, absl::InvalidArgumentError("--rows: no count"));
  if (contexts.empty()) return Fail(cmd, absl::InvalidArgumentError("--contexts: no length"));
  if (*launches < 1) return Fail(cmd, absl::InvalidArgumentError("--launches: at least 1"));
  const std::string dtype = flags.GetString("kv-cache-dtype");
  if (dtype != "bf16" && dtype != "fp8") {
    return Fail(cmd, absl::InvalidArgumentError(
                         absl::StrCat("--kv-cache-dtype: '", dtype, "' is not bf16 or fp8")));
  }
  if (kernels::DeviceCount() == 0) {
    return Fail(cmd, absl::FailedPreconditionError(kernels::NoDeviceReason()));
  }
  if (cudaError_t err = cudaSetDevice(static_cast<int>(*device)); err != cudaSuccess) {
    return Fail(cmd, absl::InvalidArgumentError(
                         absl::StrCat("--device ", *device, ": ", cudaGetErrorString(err))));
  }
  int sm_count = 0;
  cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, static_cast<int>(*device));
  nlohmann::json out = {{"benchmark", "attention"}};
  out["device"] = kernels::DeviceDescription(static_cast<int>(*device));
  out["sm_count"] = sm_count;
  nlohmann::json cases = nlohmann::json::array();
  if (flags.GetBool("prefill")) {
    out["benchmark"] = "attention-prefill";
    if (absl::Status s =
            RunPrefill(flags, shapes, static_cast<int32_t>(*launches), dtype == "fp8", cases);
        !s.ok()) {
      return Fail(cmd, s);
    }
  } else {
    // Decode attention's figure is its share of the copy bandwidth; prefill's is TFLOP/s.
    auto bandwidth = DeviceCopyBandwidth(static_cast<int>(*device));
    if (!bandwidth.ok()) return Fail(cmd, bandwidth.status());
    out["d2d_bandwidth_gb_per_s"] = *bandwidth / 1e9;
    for (const std::string& shape : shapes) {
      if (absl::Status s = RunShape(shape, rows, contexts, static_cast<int32_t>(*launches),
                                    sm_count, *bandwidth, dtype == "fp8", cases);
          !s.ok()) {
        return Fail(cmd, s);
      }
    }
  }
  out["cases"] = cases;
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

#endif

}  // namespace llm::bench
