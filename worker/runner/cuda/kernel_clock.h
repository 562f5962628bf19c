// Device time per kernel class of one step enqueued eagerly (never inside a captured graph):
// CUDA events recorded between the kernels, summed by class once the step has completed. For
// `llm-bench gpu --kernels`: where a step's time goes, without Nsight Compute.
#ifndef LLM_WORKER_RUNNER_CUDA_KERNEL_CLOCK_H_
#define LLM_WORKER_RUNNER_CUDA_KERNEL_CLOCK_H_

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace llm::runner::cuda {

enum class KernelClass : int {
  kAttention,  // prefill and decode attention (with the split-K combine)
  kProducts,   // the matrix products: qkv, o, gate/up, down, the head
  kNorms,      // RMSNorm (residual add included)
  kRopeKv,     // RoPE and the K/V write (where not fused into the GEMV)
  kSampler,    // sampling, append and stop checks
  kOther,      // step inputs, embedding, SiLU-mul (where not fused into the GEMV), row gathers
  kDraft,      // the draft model's passes before the target's (engine.speculative: draft)
};
inline constexpr int kKernelClasses = 7;

// "attention", "products", "norms", "rope_kv", "sampler", "other", "draft".
const char* KernelClassName(KernelClass c);

struct KernelTimes {
  std::array<double, kKernelClasses> ms{};  // summed over `steps`
  int64_t steps = 0;
};

class KernelClock {
 public:
  KernelClock() = default;
  ~KernelClock();
  KernelClock(const KernelClock&) = delete;
  KernelClock& operator=(const KernelClock&) = delete;

  // Events for up to `marks` marks per step, on the current device.
  absl::Status Create(int marks);
  // Starts a step: the next mark measures from here.
  void Start(cudaStream_t stream);
  // The kernels enqueued on `stream` since the previous mark (or Start) count as `c`. Marks
  // beyond the events made by Create are dropped, and their kernels' time with them: size
  // Create for the step (CudaModel::kMarksPerLayer).
  void Mark(KernelClass c, cudaStream_t stream);
  // Once the step has completed: adds its time per class to `times` (and one step).
  void AddTo(KernelTimes& times) const;

 private:
  std::vector<cudaEvent_t> events_;
  std::vector<KernelClass> classes_;  // of events_[i + 1]
  int used_ = 0;
};

}  // namespace llm::runner::cuda

#endif  // LLM_WORKER_RUNNER_CUDA_KERNEL_CLOCK_H_
