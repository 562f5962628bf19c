// Token history the host writes into the device slot table (DeviceSlots::history), for what
// the step's own rows never write there:
//   - a prefix-cache hit's cached prompt positions (their K/V came from the cache, so no
//     prefill row carries their tokens), so the n-gram proposer searches the whole prompt;
//   - the benchmark-only oracle continuation (engine::SpeculativeMethod::kOracle), written past
//     the prompt, where the oracle proposer (oracle_propose.h) reads it.
// The spans are uploaded with the step that admits or first prefills the slot and written after
// the slot update (which resets history_from) and before the step's inputs (whose prefill rows
// write their own positions, so they win where a span overlaps them).
#ifndef LLM_KERNELS_SPECULATIVE_HISTORY_WRITE_H_
#define LLM_KERNELS_SPECULATIVE_HISTORY_WRITE_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/sampling/sampling.h"

namespace llm::kernels {

// Tokens [offset, offset + count) of the upload go to positions [pos, pos + count) of the
// slot's history (those at or past history_stride are dropped).
struct HistorySpan {
  int32_t slot;
  int32_t pos;
  int32_t count;
  int32_t offset;
  // 1: the positions are the slot's searchable history (a cached prompt), so history_from is
  // lowered to pos; 0: they lie past the last token (the oracle continuation), and the rest of
  // the row, [pos + count, history_stride), is cleared to -1, so the oracle proposer stops
  // where the continuation ends (count 0: nothing to propose) whatever the slot held before.
  int32_t searchable;
};

struct HistoryWriteParams {
  const HistorySpan* spans;  // [num_spans]
  int32_t num_spans;
  const int32_t* tokens;  // the spans' tokens, back to back
  DeviceSlots slots;      // writes history, lowers history_from
};

// The CPU reference: span `s` applied to a host copy of the history and history_from.
inline void WriteHistorySpan(const HistorySpan& s, const int32_t* tokens, int32_t* history,
                             int32_t history_stride, int32_t* history_from) {
  const int32_t end = s.searchable ? s.pos + s.count : history_stride;
  for (int32_t p = s.pos; p < end && p < history_stride; ++p) {
    history[static_cast<int64_t>(s.slot) * history_stride + p] =
        p - s.pos < s.count ? tokens[s.offset + p - s.pos] : -1;
  }
  if (s.searchable && s.count > 0 && history_from != nullptr && history_from[s.slot] > s.pos) {
    history_from[s.slot] = s.pos;
  }
}

// One block per span. Nothing to do (success) without spans.
cudaError_t LaunchHistoryWrite(const HistoryWriteParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_SPECULATIVE_HISTORY_WRITE_H_
