#include <climits>

#include "kernels/common.cuh"
#include "kernels/launch.cuh"
#include "kernels/step/slot_update.h"

namespace llm::kernels {
namespace {

// Blocks [0, num_admits) each install one admission, the next num_grants blocks one grant
// each; the last block applies the row changes.
__global__ void SlotUpdateKernel(SlotUpdateParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  if (static_cast<int32_t>(blockIdx.x) >= p.num_admits &&
      static_cast<int32_t>(blockIdx.x) < p.num_admits + p.num_grants) {
    const SlotGrant g = p.grants[blockIdx.x - p.num_admits];
    int32_t* table = p.block_tables + static_cast<int64_t>(g.slot) * p.max_blocks_per_seq;
    for (int32_t i = threadIdx.x; i < g.num_blocks; i += blockDim.x) {
      table[g.first + i] = p.blocks[g.blocks_offset + i];
    }
    return;
  }
  if (blockIdx.x == p.num_admits + p.num_grants) {
    for (int32_t i = threadIdx.x; i < p.num_row_changes; i += blockDim.x) {
      p.decode_list[p.row_changes[2 * i]] = p.row_changes[2 * i + 1];
    }
    return;
  }
  const SlotAdmit a = p.admits[blockIdx.x];
  if (threadIdx.x == 0) {
    p.sampling_table[a.slot] = p.settings[blockIdx.x];
    p.slots.last_token[a.slot] = 0;
    p.slots.pos[a.slot] = 0;
    p.slots.generated[a.slot] = a.generated;
    p.slots.done[a.slot] = 0;
    if (p.slots.history_from != nullptr) p.slots.history_from[a.slot] = INT32_MAX;
    if (p.slots.num_proposals != nullptr) p.slots.num_proposals[a.slot] = 0;
  }
  int32_t* table = p.block_tables + static_cast<int64_t>(a.slot) * p.max_blocks_per_seq;
  for (int32_t i = threadIdx.x; i < a.num_blocks; i += blockDim.x) {
    table[i] = p.blocks[a.blocks_offset + i];
  }
  if (a.clear_penalties) {
    uint16_t* counts = p.slots.out_counts + static_cast<int64_t>(a.slot) * p.vocab;
    uint8_t* mask = p.slots.prompt_mask + static_cast<int64_t>(a.slot) * p.vocab;
    for (int32_t i = threadIdx.x; i < p.vocab; i += blockDim.x) {
      counts[i] = 0;
      mask[i] = 0;
    }
  }
}

}  // namespace

cudaError_t LaunchSlotUpdate(const SlotUpdateParams& p, cudaStream_t stream) {
  if (p.num_admits == 0 && p.num_grants == 0 && p.num_row_changes == 0) return cudaSuccess;
  return Launch(SlotUpdateKernel, p.num_admits + p.num_grants + 1, 256, 0, stream, p);
}

}  // namespace llm::kernels
