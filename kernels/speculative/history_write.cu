#include "kernels/launch.cuh"
#include "kernels/speculative/history_write.h"

namespace llm::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) HistoryWriteKernel(HistoryWriteParams p) {
  AfterPriorGrids();  // launch.cuh: the slot update before it reset history_from
  const HistorySpan s = p.spans[blockIdx.x];
  const DeviceSlots& slots = p.slots;
  int32_t* row = slots.history + static_cast<int64_t>(s.slot) * slots.history_stride;
  const int32_t end = s.searchable ? s.pos + s.count : slots.history_stride;
  for (int32_t i = s.pos + threadIdx.x; i < end && i < slots.history_stride; i += blockDim.x) {
    row[i] = i - s.pos < s.count ? p.tokens[s.offset + i - s.pos] : -1;
  }
  if (threadIdx.x == 0 && s.searchable && s.count > 0 && slots.history_from != nullptr) {
    atomicMin(slots.history_from + s.slot, s.pos);
  }
}

}  // namespace

cudaError_t LaunchHistoryWrite(const HistoryWriteParams& p, cudaStream_t stream) {
  if (p.num_spans <= 0) return cudaSuccess;
  if (p.spans == nullptr || p.tokens == nullptr || p.slots.history == nullptr) {
    return cudaErrorInvalidValue;
  }
  return Launch(HistoryWriteKernel, p.num_spans, kThreads, 0, stream, p);
}

}  // namespace llm::kernels
