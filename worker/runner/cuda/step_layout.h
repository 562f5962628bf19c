// The host's half of a CUDA runner step, kept free of CUDA calls so it is tested without a GPU:
// a mirror of the device slot table that checks each plan and turns it into the step's upload
// (only what changed) and batch layout.
//
// Batch layout (rows): prompt tokens first, padded so the row count is a multiple of
// kPrefillRowAlign (a prepared set of matrix shapes), then the decode rows of the smallest
// bucket holding every used decode row. A decoding slot keeps its decode row while it decodes;
// a slot that starts decoding takes the lowest free row, so the device's decode list changes
// only where slots start or stop. Sampling rows: the last row of each chunk that completes a
// prompt, then every decode row; in a decode-only step they are the decode rows themselves.
//
// Speculative decoding: when a plan's decodes carry proposals, each decoding slot's row becomes
// a verify group of `group` consecutive rows (1 + the plan's most proposals, rounded up to a
// power of two, at most StepLimits::spec_group), so decode row d of the device's list owns rows
// [d * group, (d + 1) * group) of the decode region, and each slot's allowance and block limit
// go up with the step (decode_draft, decode_limit). A constrained slot gets no allowance (its
// rows would need masks the host computes from tokens it has not seen). The device proposes and
// verifies (kernels/speculative/); the mirror does not learn how many proposals stood, so it counts
// a decode as one written position, a lower bound, as the scheduler does. A step whose groups would
// pass max_decode_rows decodes without proposals.
//
// The device's token history (what the proposers read) gets, besides what the step's rows write,
// history spans (kernels/speculative/history_write.h): a prefix-cache hit's cached prompt
// positions, with the slot's first prompt chunk, and the benchmark-only oracle continuation
// (StepLimits::oracle), with the admission. At most StepLimits::max_history_tokens tokens a step:
// a cached prefix that does not fit keeps its last positions (contiguous with the chunk's), an
// oracle its first ones.
#ifndef LLM_WORKER_RUNNER_CUDA_STEP_LAYOUT_H_
#define LLM_WORKER_RUNNER_CUDA_STEP_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/attention/prefill_attention.h"
#include "kernels/sampling/sampling.h"
#include "kernels/speculative/history_write.h"
#include "kernels/step/slot_update.h"
#include "worker/engine/engine_sizes.h"
#include "worker/engine/step.h"

namespace llm::runner::cuda {

inline constexpr int32_t kPrefillRowAlign = 64;
inline constexpr int32_t kSampleRowAlign = 16;

// Decode batch-size buckets up to max_slots: fine where batches are small, coarser above.
std::vector<int32_t> MakeBuckets(int32_t max_slots);

// The device's copy of a request's settings.
kernels::SlotSampling ToSlotSampling(const engine::EngineRequest& request);

struct StepLimits {
  engine::EngineSizes sizes;
  int32_t max_blocks_per_seq = 0;
  int32_t max_context = 0;
  int32_t vocab_size = 0;
  int32_t max_prefill_tokens = 0;
  int32_t attention_group = 1;  // query heads per kv head: the prefill attention's row packing
  // Speculative decoding: the most rows a decoding slot takes (1: none, and a plan with
  // proposals is refused), and the most decode rows a step holds (0: max_slots).
  int32_t spec_group = 1;
  int32_t max_decode_rows = 0;
  // History spans' tokens a step may upload (0: none, without speculation), and whether the
  // requests' oracle_ids go to the history (the oracle proposer).
  int32_t max_history_tokens = 0;
  bool oracle = false;
  // Constrained requests get their proposals too (engine.cuda_speculate_constrained); else a
  // constrained slot's allowance is 0.
  bool speculate_constrained = false;
  // The proposer is a draft model kept up to date by a catch-up pass in every step that
  // decodes without verifying: a slot decoding in a step that skipped it (StepLayout::
  // draft_catch_up) gets no proposals afterwards (its draft missed a position).
  bool draft = false;
};

// The verify group sizes a step may use with up to spec_group - 1 proposals a slot: 1 + a power
// of two, and spec_group itself (the products' plans are made for each).
std::vector<int32_t> SpeculativeGroups(int32_t spec_group);

// One step, ready to stage: the upload arrays (each copied to the device as it is) and the
// batch's shape.
struct StepLayout {
  std::vector<kernels::SlotAdmit> admits;
  std::vector<kernels::SlotSampling> settings;
  std::vector<kernels::SlotGrant> grants;
  std::vector<int32_t> blocks;       // the admissions' then the grants' block lists, back to back
  std::vector<int32_t> row_changes;  // (decode row, slot or -1) pairs
  std::vector<int32_t> prefill_slot, prefill_pos, prefill_token;  // [prefill_rows], -1 slots pad
  // The prompt chunks (their rows back to back from row 0) and the prefill attention's tiles.
  std::vector<kernels::PrefillChunk> prefill_chunks;
  std::vector<kernels::PrefillTile> prefill_tiles;
  // The tiles of the last layer, which computes only the rows that are sampled: those holding
  // the last token of a chunk that completes its prompt (kernels::SelectLastTokenTiles).
  std::vector<kernels::PrefillTile> last_token_tiles;
  std::vector<uint8_t> chunk_samples;  // [prefill_chunks] whether the chunk completes a prompt
  std::vector<int32_t> sample_rows;    // batch row of each sampling row, -1 pads (mixed steps)
  // Speculative steps (group > 1): per decode row of the device's list (bucket entries), the
  // proposals its slot may have (0 for an unused row).
  std::vector<int32_t> decode_draft;
  // And the positions its KV blocks hold (blocks * block_tokens): no row writes past them.
  std::vector<int32_t> decode_limit;
  int32_t group = 1;  // rows per decoding slot
  // With a draft model, a step that decodes without verifying (group 1) runs the draft's
  // catch-up pass (cuda_draft.h) unless this is false: the plan let the draft lapse
  // (StepPlan::draft_may_lapse) or no decoding slot may get proposals any more.
  bool draft_catch_up = false;
  // Speculative decoding: tokens for the device's history, written before the step's inputs.
  std::vector<kernels::HistorySpan> history_spans;
  std::vector<int32_t> history_tokens;  // the spans' tokens, back to back

  int32_t bucket = -1;             // index into the buckets; -1: no decode rows
  int32_t rows = 0;                // prefill_rows + decode_rows
  int32_t prefill_rows = 0;        // including padding
  int32_t decode_rows = 0;         // the bucket's size times group
  int32_t num_sample_rows = 0;     // including padding
  bool identity_sampling = false;  // decode only: the decode rows sample, in order
  // Every slot that samples in this step is kernels::ArgmaxOnly: the sampler's two-launch path.
  bool argmax_only = false;

  // Nothing to upload: a decode step whose decoding slots did not change.
  bool upload_empty() const {
    return admits.empty() && grants.empty() && row_changes.empty() && prefill_slot.empty() &&
           sample_rows.empty() && decode_draft.empty() && decode_limit.empty() &&
           history_spans.empty();
  }
};

class SlotMirror {
 public:
  // `buckets` ascending, the last one max_slots.
  SlotMirror(const StepLimits& limits, std::vector<int32_t> buckets);

  // Checks `plan` against the table: slots in range, admissions into free slots with blocks
  // covering their prefix (prompt and resumed tokens) and settings within the device's limits,
  // block grants to running slots not admitted by the same plan and within a block table,
  // prefix chunks inside their prefix and blocks (one per slot, none after the prefix
  // completed), decodes only of slots whose prefix completed in an earlier step, each once and
  // writing inside the slot's blocks, with proposals only when the runner speculates.
  // INVALID_ARGUMENT naming the plan and the slot; the table is unchanged either way.
  absl::Status Check(const engine::StepPlan& plan);
  // Applies a plan that passed Check (and nothing in between) and lays out its step.
  void Apply(const engine::StepPlan& plan, StepLayout& layout);

  const std::vector<int32_t>& buckets() const { return buckets_; }
  int32_t rows_in_use() const { return rows_in_use_; }
  // The decode row of `slot`, or -1.
  int32_t decode_row(int32_t slot) const { return slots_[slot].decode_row; }
  // The slot each sampling row of `layout` (the last one Apply made) samples for, -1 for
  // padding: what the device's row_slot holds, on the host (structured output's masks). A
  // verify group's row within its slot's allowance counts as the slot's, though the device
  // pads it when the proposer found fewer proposals. `offsets`: each row's offset in its verify
  // group (0 outside groups).
  void SampleRowSlots(const StepLayout& layout, std::vector<int32_t>& slots,
                      std::vector<int32_t>& offsets) const;

 private:
  struct Slot {
    engine::RequestPtr request;
    std::vector<int32_t> resumed;  // tokens generated before a preemption (the prefix's tail)
    int32_t blocks = 0;            // KV blocks in its table
    int32_t written = 0;           // positions its planned steps write
    int32_t decode_row = -1;
    bool sampled = false;       // its prompt is complete: it decodes from now on
    bool argmax_only = false;   // kernels::ArgmaxOnly of its settings
    bool chunked = false;       // a prompt chunk of it was laid out since its admission
    bool draft_lapsed = false;  // decoded in a step without the draft's catch-up pass
    // == mark_ when this plan releases, admits, prefills or decodes it.
    uint64_t released = 0, admitted = 0, prefilled = 0, decoded = 0, granted = 0;
  };
  absl::Status CheckAdmissions(const engine::StepPlan& plan);
  absl::Status CheckGrants(const engine::StepPlan& plan);
  // Apply's parts: the layout emptied; releases, admissions and block grants; the decode rows
  // (slots that stopped decoding free theirs, new ones take the lowest free; changes marked
  // by ChangeRow); the prompt rows and tiles of a step with `decode_rows` decode rows.
  static void ClearLayout(StepLayout& layout);
  void ChangeRow(int32_t row);
  void ApplySlots(const engine::StepPlan& plan, StepLayout& layout);
  void AssignDecodeRows(const engine::StepPlan& plan, StepLayout& layout);
  void LayOutPrefill(const engine::StepPlan& plan, int32_t decode_rows, StepLayout& layout);
  // The step's verify group size and each decode row's allowance (group > 1).
  void LayOutGroups(const engine::StepPlan& plan, int32_t bucket_rows, StepLayout& layout) const;
  // Whether the request in slot `x` may get proposals (it did not opt out, is not constrained
  // where constrained slots do not speculate, and its draft has not lapsed).
  bool MaySpeculate(const Slot& x) const;
  // layout.draft_catch_up for a step laid out without verify groups, and the slots whose draft
  // lapses when it is false.
  void DecideCatchUp(const engine::StepPlan& plan, StepLayout& layout);
  // The prefix token at `pos` of the request in slot `x`.
  static int32_t PrefixToken(const Slot& x, int32_t pos);
  // History spans: the oracle continuation of a slot admitted by the plan, and the cached
  // prompt positions before a slot's first chunk.
  void AddOracleSpan(int32_t slot, StepLayout& layout) const;
  void AddCachedSpan(int32_t slot, int32_t start, StepLayout& layout) const;

  StepLimits limits_;
  std::vector<int32_t> buckets_;
  std::vector<Slot> slots_;
  std::vector<int32_t> blocks_after_;  // per slot, its blocks after the checked plan
  std::vector<int32_t> decode_rows_;   // slot per row, -1 unused
  std::vector<uint64_t> row_changed_;
  std::vector<int32_t> changed_rows_;
  int32_t rows_in_use_ = 0;  // highest used decode row + 1
  int32_t checked_prefill_tokens_ = 0;
  uint64_t mark_ = 0;  // per checked plan
};

}  // namespace llm::runner::cuda

#endif  // LLM_WORKER_RUNNER_CUDA_STEP_LAYOUT_H_
