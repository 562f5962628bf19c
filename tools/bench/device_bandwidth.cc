#include "tools/bench/device_bandwidth.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace llm::bench {

absl::StatusOr<double> DeviceCopyBandwidth(int device) {
  constexpr size_t kBytes = size_t{1} << 30;
  if (cudaSetDevice(device) != cudaSuccess) return absl::InternalError("cudaSetDevice");
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, kBytes) != cudaSuccess || cudaMalloc(&b, kBytes) != cudaSuccess) {
    if (a != nullptr) cudaFree(a);
    return absl::ResourceExhaustedError("bandwidth test: cannot allocate 2 GiB");
  }
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaMemcpy(b, a, kBytes, cudaMemcpyDeviceToDevice);  // warm-up
  double best = 0.0;
  for (int round = 0; round < 5; ++round) {
    constexpr int kCopies = 10;
    cudaEventRecord(start);
    for (int i = 0; i < kCopies; ++i) cudaMemcpyAsync(b, a, kBytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    best = std::max(best, 2.0 * kBytes * kCopies / (ms * 1e-3));
  }
  const cudaError_t err = cudaGetLastError();
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(a);
  cudaFree(b);
  if (err != cudaSuccess) return absl::InternalError(cudaGetErrorString(err));
  return best;
}

}  // namespace llm::bench
