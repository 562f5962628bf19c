// llm-bench attention: the decode attention kernels alone (kernels/attention.h) on one device,
// without a model or a runner: for each model shape's heads, each batch and each context, both
// kernels (tensor cores and CUDA cores) on a paged cache of random bf16 with the chunk split the
// runner would use (DecodeSplits), the device time per launch (mean of --launches, after a
// warm-up) and the K/V bandwidth it reaches — K and V bytes read per second, and that over the
// device-to-device copy bandwidth — the figure issue 12 starts from ("decode attention reads
// K/V at about a third of the bandwidth"). Blocks of a row are scattered over the cache as a
// serving cache's are.
#include <algorithm>
#include <cmath>
#include <cstdio>
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

#include "kernels/attention.h"
#include "kernels/device.h"
#include "kernels/random_init.h"
#include "tools/bench/device_bandwidth.h"
#include "worker/model/shapes.h"
#endif

namespace llm::bench {

#ifndef LLM_HAVE_CUDA

int RunAttentionBench(const std::vector<std::string>&) {
  std::fprintf(stderr, "llm-bench attention: this build has no CUDA (LLM_ENABLE_CUDA=OFF)\n");
  return 1;
}

#else

namespace {

// Device allocations freed together at scope exit; failed() once any of them could not be made.
class DeviceArena {
 public:
  ~DeviceArena() {
    for (void* p : owned_) cudaFree(p);
  }
  template <typename T>
  T* Take(size_t count) {
    void* p = nullptr;
    if (cudaMalloc(&p, std::max<size_t>(1, count) * sizeof(T)) != cudaSuccess) {
      failed_ = true;
      return nullptr;
    }
    owned_.push_back(p);
    return static_cast<T*>(p);
  }
  bool failed() const { return failed_; }

 private:
  std::vector<void*> owned_;
  bool failed_ = false;
};

absl::Status CudaOk(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

// One model shape's heads at every (rows, context), both kernels.
absl::Status RunShape(const std::string& shape, const std::vector<int32_t>& row_counts,
                      const std::vector<int32_t>& contexts, int32_t launches, int32_t sm_count,
                      double copy_bandwidth, nlohmann::json& cases) {
  auto config = model::ShapeConfig(shape);
  if (!config.ok()) return config.status();
  const int32_t H = config->num_heads, KV = config->num_kv_heads, D = config->head_dim;
  if (!kernels::AttentionSupported(D, H, KV)) {
    return absl::InvalidArgumentError(absl::StrCat(shape, ": heads not supported"));
  }
  constexpr int32_t kBlockTokens = 16, kMaxSplits = 64;
  const int32_t max_rows = *std::max_element(row_counts.begin(), row_counts.end());
  const int32_t max_context = *std::max_element(contexts.begin(), contexts.end());
  const int32_t max_blocks = (max_context + kBlockTokens - 1) / kBlockTokens;
  const int64_t blocks = int64_t{max_rows} * max_blocks;
  const int64_t cache_elems = blocks * KV * kBlockTokens * D;
  const int64_t qkv_elems = int64_t{max_rows} * (H + 2 * KV) * D;
  const int64_t parts = int64_t{max_rows} * H * kMaxSplits;

  DeviceArena arena;
  auto* k = arena.Take<__nv_bfloat16>(cache_elems);
  auto* v = arena.Take<__nv_bfloat16>(cache_elems);
  auto* qkv = arena.Take<__nv_bfloat16>(qkv_elems);
  auto* out = arena.Take<__nv_bfloat16>(int64_t{max_rows} * H * D);
  auto* part_out = arena.Take<float>(parts * D);
  auto* part_max = arena.Take<float>(parts);
  auto* part_sum = arena.Take<float>(parts);
  auto* arrivals = arena.Take<int32_t>(int64_t{max_rows} * KV);
  auto* tables = arena.Take<int32_t>(blocks);
  auto* row_pos = arena.Take<int32_t>(max_rows);
  auto* row_slot = arena.Take<int32_t>(max_rows);
  if (arena.failed()) {
    return absl::ResourceExhaustedError(
        absl::StrCat(shape, ": cannot allocate a ", (2 * cache_elems * 2) >> 20, " MiB cache"));
  }
  LLM_RETURN_IF_ERROR(CudaOk(
      kernels::LaunchRandomInit({k, nullptr, cache_elems, 1, 1.0f, 0.0f}, nullptr), "init K"));
  LLM_RETURN_IF_ERROR(CudaOk(
      kernels::LaunchRandomInit({v, nullptr, cache_elems, 2, 1.0f, 0.0f}, nullptr), "init V"));
  LLM_RETURN_IF_ERROR(CudaOk(
      kernels::LaunchRandomInit({qkv, nullptr, qkv_elems, 3, 1.0f, 0.0f}, nullptr), "init q"));
  // Block j of row r is block j * max_rows + r: a row's blocks are far apart.
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int32_t r = 0; r < max_rows; ++r) {
    for (int32_t j = 0; j < max_blocks; ++j) {
      table[static_cast<size_t>(r) * max_blocks + j] = j * max_rows + r;
    }
  }
  std::vector<int32_t> slots(static_cast<size_t>(max_rows));
  for (int32_t r = 0; r < max_rows; ++r) slots[r] = r;
  LLM_RETURN_IF_ERROR(CudaOk(
      cudaMemcpy(tables, table.data(), table.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
      "block tables"));
  LLM_RETURN_IF_ERROR(CudaOk(
      cudaMemcpy(row_slot, slots.data(), slots.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
      "slots"));
  LLM_RETURN_IF_ERROR(
      CudaOk(cudaMemset(arrivals, 0, sizeof(int32_t) * max_rows * KV), "arrival counters"));
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  absl::Status status = absl::OkStatus();
  for (const int32_t context : contexts) {
    std::vector<int32_t> pos(static_cast<size_t>(max_rows), context - 1);
    status = CudaOk(
        cudaMemcpy(row_pos, pos.data(), pos.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
        "positions");
    if (!status.ok()) break;
    for (const int32_t rows : row_counts) {
      for (const bool tensor_cores : {true, false}) {
        kernels::AttentionParams p{};
        p.qkv = qkv;
        p.k_cache = k;
        p.v_cache = v;
        p.row_pos = row_pos;
        p.row_slot = row_slot;
        p.block_tables = tables;
        p.max_blocks_per_seq = max_blocks;
        p.out = out;
        p.partial_out = part_out;
        p.partial_max = part_max;
        p.partial_sum = part_sum;
        p.split_arrivals = arrivals;
        p.rows = rows;
        p.num_heads = H;
        p.num_kv_heads = KV;
        p.head_dim = D;
        p.block_tokens = kBlockTokens;
        p.splits = kernels::DecodeSplits(rows, KV, sm_count, kMaxSplits);
        p.scale = 1.0f / std::sqrt(static_cast<float>(D));
        // A head size without the tensor-core kernel ran the CUDA-core one already.
        if (!tensor_cores && !kernels::AttentionUsesTensorCores(p)) continue;
        p.tensor_cores = tensor_cores;
        for (int i = 0; i < 3 && status.ok(); ++i) {
          status = CudaOk(kernels::LaunchAttention(p, nullptr), "attention");
        }
        cudaEventRecord(start);
        for (int i = 0; i < launches && status.ok(); ++i) {
          status = CudaOk(kernels::LaunchAttention(p, nullptr), "attention");
        }
        cudaEventRecord(stop);
        if (status.ok()) status = CudaOk(cudaEventSynchronize(stop), "attention launches");
        if (!status.ok()) break;
        float ms = 0;
        cudaEventElapsedTime(&ms, start, stop);
        const double seconds = ms * 1e-3 / launches;
        const double kv_bytes = 2.0 * rows * context * KV * D * sizeof(__nv_bfloat16);
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
             {"us", seconds * 1e6},
             {"kv_gb_per_s", kv_bytes / seconds / 1e9},
             {"bandwidth_use", kv_bytes / seconds / copy_bandwidth}});
      }
      if (!status.ok()) break;
    }
    if (!status.ok()) break;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return status;
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
      .Value("launches", "timed launches per case", "20");
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
  if (kernels::DeviceCount() == 0) {
    return Fail(cmd, absl::FailedPreconditionError(kernels::NoDeviceReason()));
  }
  if (cudaError_t err = cudaSetDevice(static_cast<int>(*device)); err != cudaSuccess) {
    return Fail(cmd, absl::InvalidArgumentError(
                         absl::StrCat("--device ", *device, ": ", cudaGetErrorString(err))));
  }
  auto bandwidth = DeviceCopyBandwidth(static_cast<int>(*device));
  if (!bandwidth.ok()) return Fail(cmd, bandwidth.status());
  int sm_count = 0;
  cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, static_cast<int>(*device));
  nlohmann::json out = {{"benchmark", "attention"}};
  out["device"] = kernels::DeviceDescription(static_cast<int>(*device));
  out["d2d_bandwidth_gb_per_s"] = *bandwidth / 1e9;
  out["sm_count"] = sm_count;
  nlohmann::json cases = nlohmann::json::array();
  for (const std::string& shape : shapes) {
    if (absl::Status s = RunShape(shape, rows, contexts, static_cast<int32_t>(*launches), sm_count,
                                  *bandwidth, cases);
        !s.ok()) {
      return Fail(cmd, s);
    }
  }
  out["cases"] = cases;
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

#endif

}  // namespace llm::bench
