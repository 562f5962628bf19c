// Applies the host's changes to the device slot table at the start of a step: requests placed
// into slots (their sampling settings, KV block table row, counters reset, penalty state
// cleared), blocks appended to running slots' block tables (KV on demand) and changes to the
// decode row list. Everything else in the table is written only by
// the device (the sampler's append step), so a step with no changes needs no upload at all.
#ifndef LLM_KERNELS_STEP_SLOT_UPDATE_H_
#define LLM_KERNELS_STEP_SLOT_UPDATE_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/sampling/sampling.h"

namespace llm::kernels {

// A request placed into `slot`.
struct SlotAdmit {
  int32_t slot;
  int32_t num_blocks;       // its KV blocks: blocks[blocks_offset, blocks_offset + num_blocks)
  int32_t blocks_offset;    // into SlotUpdateParams::blocks
  int32_t clear_penalties;  // zero the slot's output counts and prompt mask
  // Outputs the request generated before a preemption (0 for a first admission): the
  // sampler's counter and max_tokens continue from it. The step prefills them (the prefill
  // rows past the prompt count them for the penalties).
  int32_t generated;
};

// Blocks appended to the block table of the request in `slot`: table entries
// [first, first + num_blocks) = blocks[blocks_offset, blocks_offset + num_blocks). Never a slot
// admitted by the same update (their table writes would race).
struct SlotGrant {
  int32_t slot;
  int32_t first;
  int32_t num_blocks;
  int32_t blocks_offset;
};

struct SlotUpdateParams {
  // Uploaded with the step.
  const SlotAdmit* admits;       // [num_admits]
  const SlotSampling* settings;  // [num_admits]
  const int32_t* blocks;         // flat block lists
  const int32_t* row_changes;    // [num_row_changes][2]: decode row, slot (-1: row unused)
  const SlotGrant* grants;       // [num_grants], their blocks in `blocks` too
  int32_t num_admits;
  int32_t num_grants;
  int32_t num_row_changes;
  // The device state they change.
  DeviceSlots slots;
  SlotSampling* sampling_table;  // = slots.sampling, writable
  int32_t* block_tables;         // [max_slots, max_blocks_per_seq]
  int32_t max_blocks_per_seq;
  int32_t* decode_list;  // [max decode rows]
  int32_t vocab;
};

cudaError_t LaunchSlotUpdate(const SlotUpdateParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_STEP_SLOT_UPDATE_H_
