// Structured output for a runner that samples on the device (the CUDA runner): each slot's
// constraint::Matcher, advanced by the tokens the device sampled, and the bitmask rows the
// device sampler applies (kernels::SampleParams::masks). Pure logic, tested without a GPU; the
// runner's engine thread owns it.
//
// Pipelining. Step N+1 is launched before the host has seen step N's tokens, and a constrained
// row's mask depends on them. So the runner launches step N+1's forward pass at once, and
// enqueues its sampling only once Collect(N) has passed step N's tokens to OnToken (the
// device runs the forward meanwhile): the masks are computed while the GPU works, and no
// unconstrained step waits for anything.
//
// Speculative decoding. A decoding slot's verify group (cuda/step_layout.h) samples rows 0 .. k
// at once, row j > 0 checking the slot's proposal j - 1, which the device made at the start of
// the step: row j's mask is the matcher's after proposals 0 .. j - 1 (what the CPU runner's
// SampleSlot applies there), written from the host's copy of the proposals (WriteGroupMasks).
//
// Stale tokens. A slot released and admitted again while an earlier step is in flight still
// gets that step's token for the old request: a token counts only when it carries the slot's
// request key and comes from a step launched at or after the admission.
#ifndef LLM_WORKER_RUNNER_SLOT_CONSTRAINTS_H_
#define LLM_WORKER_RUNNER_SLOT_CONSTRAINTS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/finish_reason.h"
#include "common/thread_pool.h"
#include "worker/constraint/constraint.h"
#include "worker/engine/step.h"

namespace llm::runner {

class SlotConstraints {
 public:
  // Masks over `vocab` ids; rows of a step are written by `threads` threads (1: the caller);
  // at most `max_rows` constrained rows a step (0: one a slot) before WriteMasks allocates.
  SlotConstraints(int32_t max_slots, int32_t vocab, int threads, int32_t max_rows = 0);

  // The plan's releases, then its admissions: a constrained request gets a matcher, advanced
  // over its resumed tokens.
  void OnPlan(const engine::StepPlan& plan);
  // A token the device sampled for `slot` in step `step_id`; a stop token does not advance.
  void OnToken(uint64_t step_id, int32_t slot, uint64_t key, int32_t token,
               sampling::FinishReason finish);

  // The launch of step `step_id`, whose sampling rows sample for `row_slots` (-1: padding),
  // `oldest_in_flight` being the oldest step launched and not yet collected (kNothingInFlight
  // when none is): whether a row is constrained, and whether its masks can be written now,
  // which they can when none of its constrained slots samples in a step still in flight (whose
  // token would move the matcher first): nothing in flight, or requests just admitted. Any step
  // id works, 0 included.
  static constexpr uint64_t kNothingInFlight = ~uint64_t{0};
  struct LaunchMasks {
    bool masked = false;
    bool ready = true;
  };
  LaunchMasks OnLaunch(uint64_t step_id, uint64_t oldest_in_flight,
                       std::span<const int32_t> row_slots);

  bool constrained(int32_t slot) const { return slots_[slot].matcher != nullptr; }
  // Slots with a matcher (a step without any of them samples as before).
  int32_t active() const { return active_; }
  size_t words() const { return words_; }

  // The step's mask rows: for each sampling row i (its slot in row_slots[i], -1 padding),
  // mask_index[i] is -1 for an unconstrained row, else k, whose mask is written to
  // masks[k * words(), (k + 1) * words()). Returns the number of masks written, or -1 when
  // `masks` cannot hold them.
  int32_t WriteMasks(std::span<const int32_t> row_slots, std::span<int32_t> mask_index,
                     std::span<uint64_t> masks);

  // The host's copy of the step's proposals (kernels::DeviceSlots::proposals, num_proposals).
  struct Proposals {
    std::span<const int32_t> tokens;  // [slots, stride]
    std::span<const int32_t> counts;  // [slots] how many of a slot's tokens are real
    int32_t stride = 0;
  };
  // WriteMasks for rows at offset row_offset[i] of their slot's verify group (empty: all 0).
  // Row j > 0 gets the matcher's mask after the slot's proposals 0 .. j - 1. A row that
  // verification cannot reach gets no mask (-1, its draw is discarded): one past the slot's
  // proposals, or after a proposal the constraint refuses (it cannot stand: its own row's mask
  // forbids it) or a stop id (it ends the request). Masks are numbered before that is known,
  // so such a row leaves its mask's place unused.
  int32_t WriteGroupMasks(std::span<const int32_t> row_slots, std::span<const int32_t> row_offset,
                          const Proposals& proposals, std::span<int32_t> mask_index,
                          std::span<uint64_t> masks);

 private:
  struct Slot {
    std::unique_ptr<constraint::Matcher> matcher;
    uint64_t key = 0;
    uint64_t since_step = 0;  // tokens of earlier steps belong to an earlier request
    // The last step launched with a sampling row for it, if any since its admission.
    std::optional<uint64_t> last_sampled;
    std::vector<int32_t> stop_ids;
  };
  std::vector<Slot> slots_;
  size_t words_;
  int32_t active_ = 0;
  ThreadPool pool_;
  // Writes sampling row i's mask (its slot's matcher after `run`) to `mask`, or sets
  // mask_index[i] to -1 where verification cannot reach the row.
  void WriteRowMask(int32_t slot, std::span<const int32_t> run, std::span<uint64_t> mask,
                    int32_t& mask_index) const;

  std::vector<int32_t> todo_;  // scratch: the sampling rows that have a mask
};

}  // namespace llm::runner

#endif  // LLM_WORKER_RUNNER_SLOT_CONSTRAINTS_H_
