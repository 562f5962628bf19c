#include "kernels/launch.cuh"
#include "kernels/speculative/ngram_propose.h"
#include "kernels/speculative/oracle_propose.h"

namespace llm::kernels {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) OracleProposeKernel(OracleProposeParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  const int32_t d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= p.num_decode) return;
  const int32_t slot = p.decode_list[d];
  if (slot < 0) return;
  const DeviceSlots& s = p.slots;
  const int32_t k = SlotAllowance(s, slot, p.decode_draft[d], p.decode_limit[d]);
  s.num_proposals[slot] =
      OracleProposals(s.history + static_cast<int64_t>(slot) * s.history_stride, s.history_stride,
                      s.pos[slot], k, s.proposals + static_cast<int64_t>(slot) * s.max_proposals);
}

}  // namespace

cudaError_t LaunchOraclePropose(const OracleProposeParams& p, cudaStream_t stream) {
  if (p.num_decode <= 0) return cudaSuccess;
  if (p.slots.proposals == nullptr || p.slots.num_proposals == nullptr ||
      p.slots.history == nullptr || p.decode_draft == nullptr || p.decode_limit == nullptr) {
    return cudaErrorInvalidValue;
  }
  return Launch(OracleProposeKernel, (p.num_decode + kThreads - 1) / kThreads, kThreads, 0, stream,
                p);
}

}  // namespace llm::kernels
