#include "tools/bench/device_bandwidth.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "common/status_macros.h"
#include "worker/runner/cuda/cuda_util.h"

namespace llm::bench {

absl::StatusOr<double> DeviceCopyBandwidth(int device) {
  using runner::cuda::DeviceMemory;
  using runner::cuda::Event;
  constexpr size_t kBytes = size_t{1} << 30;
  constexpr int kCopies = 10;
  LLM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device), "bandwidth test: cudaSetDevice");
  DeviceMemory a, b;
  LLM_RETURN_IF_ERROR(a.Allocate(kBytes, "bandwidth test: 1 GiB source"));
  LLM_RETURN_IF_ERROR(b.Allocate(kBytes, "bandwidth test: 1 GiB destination"));
  Event start, stop;
  LLM_RETURN_IF_ERROR(start.Create());
  LLM_RETURN_IF_ERROR(stop.Create());
  LLM_CUDA_RETURN_IF_ERROR(cudaMemcpy(b.get(), a.get(), kBytes, cudaMemcpyDeviceToDevice),
                           "bandwidth test: warm-up copy");
  double best = 0.0;
  for (int round = 0; round < 5; ++round) {
    LLM_CUDA_RETURN_IF_ERROR(cudaEventRecord(start.get()), "bandwidth test: event");
    for (int i = 0; i < kCopies; ++i) {
      LLM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.get(), a.get(), kBytes, cudaMemcpyDeviceToDevice),
                               "bandwidth test: copy");
    }
    LLM_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop.get()), "bandwidth test: event");
    LLM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop.get()), "bandwidth test: copies");
    const double seconds = runner::cuda::ElapsedSeconds(start, stop);
    if (seconds > 0.0) best = std::max(best, 2.0 * kBytes * kCopies / seconds);
  }
  if (best <= 0.0) return absl::InternalError("bandwidth test: the copies were not timed");
  return best;
}

}  // namespace llm::bench
