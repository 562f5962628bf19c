// Token selection on the device, split over vocabulary chunks (kernels/sampling/sampling.cu lists
// the passes, kernels/sampling/sample_select.h the top-k/top-p selects), and the append/stop step
// that writes each slot's next input token into the device slot table.
//
// The rules are the CPU sampler's (worker/sampling/sampler.h): penalties (repetition over the
// prompt and the output, presence and frequency over the output); greedy argmax with ties to
// the lowest id; else p = FastExp((l - max) / T), top-k (ties by id), top-p (the smallest
// prefix in descending order, ties by id, whose mass reaches top_p of the kept mass), min-p
// (p >= min_p, the top probability being exactly 1), and the first token in id order whose
// cumulative kept mass exceeds u * kept mass, u = UniformDouble(seed, tokens generated so far).
// Every reduction has a fixed order or adds integers, so a row's result never depends on the
// rest of the batch. A constrained row's bitmask (SampleParams::masks) applies first.
#ifndef LLM_KERNELS_SAMPLING_SAMPLING_H_
#define LLM_KERNELS_SAMPLING_SAMPLING_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "common/finish_reason.h"
#include "kernels/sampling/sample_select.h"

namespace llm::kernels {

inline constexpr int kMaxStopIds = 80;
inline constexpr int kMaxTopLogprobs = 20;

// A slot's request settings, written at admission.
struct SlotSampling {
  float temperature;  // 0: greedy
  float top_p;
  float min_p;
  float repetition_penalty;
  float presence_penalty;
  float frequency_penalty;
  int32_t top_k;
  int32_t max_tokens;
  uint64_t seed;
  uint64_t key;  // the request's key, echoed in outputs
  int32_t num_stop_ids;
  int32_t num_top_logprobs;  // 0..kMaxTopLogprobs
  uint8_t want_logprob;
  uint8_t has_penalties;
  uint8_t pad[2];
  // The prompt's length: a prefill row past it holds a token the request generated before a
  // preemption, counted as an output (penalties) rather than marked as a prompt token.
  int32_t prompt_tokens;
  int32_t stop_ids[kMaxStopIds];  // EOS ids and the request's stop ids
};

// The device slot table (struct of arrays over max_slots).
struct DeviceSlots {
  int32_t* last_token;  // the next decode input
  int32_t* pos;         // tokens whose K/V are in the cache
  int32_t* generated;   // output tokens so far
  uint8_t* done;        // finished: later decodes are skipped
  const SlotSampling* sampling;
  uint16_t* out_counts;  // [slots, vocab] output token counts (penalties), saturating
  uint8_t* prompt_mask;  // [slots, vocab] 1 for prompt tokens (repetition penalty)
  // Speculative decoding's token history, or null: [slots, history_stride], entry p the token
  // at position p (the prompt's, written by the step's prefill rows and the host's history
  // spans, then each appended token),
  // so the n-gram proposer (kernels/speculative/ngram_propose.h) reads it without the host.
  int32_t* history = nullptr;
  int32_t history_stride = 0;
  // [slots] the first position of the searchable history: the lowest its prefill rows or a
  // cached prompt's history span (kernels/speculative/history_write.h) wrote; positions before
  // it are not in the history (INT32_MAX from admission to its first prefill row). The n-gram
  // proposer searches [history_from, pos]; the oracle reads past pos.
  int32_t* history_from = nullptr;
  // The proposals of each slot's verify group, made on the device by the proposer at the start
  // of a step: [slots, max_proposals] ids, and how many of them are real ([slots]). Null
  // without speculative decoding.
  int32_t* proposals = nullptr;
  int32_t* num_proposals = nullptr;
  int32_t max_proposals = 0;
};

// One sampling row's result. A row that sampled nothing (padding, or a slot already finished:
// the pipeline's extra step) has slot -1.
struct SampleOutput {
  uint64_t key;
  int32_t slot;
  int32_t token;
  sampling::FinishReason finish;  // kNone, kStopToken or kLength
  float logprob;
  int32_t num_top;
  // Speculative verification, on the first row of a slot's verify group: the proposals it
  // verified and how many of them stood (0 elsewhere).
  int32_t draft_tokens;
  int32_t accepted_tokens;
  int32_t top_ids[kMaxTopLogprobs];
  float top_logprobs[kMaxTopLogprobs];
};

// The vocabulary is cut into chunks, a block each, for every pass over it (so a batch of one is
// not one block reading the whole vocabulary); what crosses chunks is reduced in chunk order or
// in integers, so a row's result does not depend on how many blocks ran or in what order.
inline constexpr int32_t kSampleChunkIds = 4096;
inline constexpr int32_t kMaxSampleChunks = 32;

// Chunk kernels whose row's last block then does the row's step (a select level, the draw's
// chunk): an arrival counter each.
inline constexpr int kSelectPasses = 2 * kDigitLevels;  // top-k, then top-p
inline constexpr int kSampleArrivals = kSelectPasses + 1;

// A sampling row's workspace, reset by the first kernel of every launch.
struct SampleRowWork {
  SampleRowState state;
  uint32_t arrived[kSampleArrivals];
  float chunk_max[kMaxSampleChunks];    // each chunk's maximum logit
  int32_t chunk_arg[kMaxSampleChunks];  // and its lowest id
  double chunk_mass[kMaxSampleChunks];  // probability sums; later the mass kept above eq_key
  int32_t chunk_eq[kMaxSampleChunks];   // tokens at eq_key
  uint64_t count[kDigitBuckets];        // the select level's histogram over the row
  uint64_t mass[kDigitBuckets];
  // Each chunk's first num_top_logprobs logits in ArgmaxBetter order with their ids (kNoTopId
  // past the chunk's last; TopLogprobAfter), for DrawKernel to merge into the row's list.
  float top_v[kMaxSampleChunks][kMaxTopLogprobs];
  int32_t top_i[kMaxSampleChunks][kMaxTopLogprobs];
};

struct SampleParams {
  float* logits;            // [rows, vocab] fp32; penalties are applied in place
  float* probs;             // [rows, vocab] scratch
  const int32_t* row_slot;  // [rows] slot of each sampling row, -1 for padding
  const int32_t* row_pos;   // [rows] position of the token whose logits these are
  DeviceSlots slots;
  SampleOutput* out;  // [rows]
  int32_t rows;
  int32_t vocab;
  int32_t valid_vocab;  // ids >= this are never sampled
  SampleRowWork* work;  // [rows]
  // The caller knows every sampling row's slot is ArgmaxOnly (padding and finished slots aside):
  // only the first and last kernels run (2 launches instead of 9), with the same results. A
  // row that is not ArgmaxOnly gets its argmax and no logprobs then.
  bool argmax_only = false;
  // Structured output (worker/runner/slot_constraints.h): a row with mask_index[row] = k >= 0
  // may sample only the ids whose bit is set in mask k (`mask_words` words at masks + k *
  // mask_words; bit t of word t / 64); every other id's logit becomes -inf before the
  // penalties, as constraint::ApplyTokenMask does on the CPU. Null: no row is masked.
  const int32_t* mask_index = nullptr;
  const uint64_t* masks = nullptr;
  int32_t mask_words = 0;
  // Speculative verification (kernels/speculative/verify.h), or null: row r is the
  // row_offset[r]-th row of its slot's verify group, so its draw uses the counter generated +
  // row_offset[r] (the draw a run without speculation makes for that token), and DrawKernel
  // writes the row's token and logprobs but appends nothing: LaunchVerify appends the accepted
  // run afterwards. A row's penalties count the group's proposals before it as outputs
  // (GroupOutputCount, kernels/sampling/append.h), as the CPU verifier counts them.
  const int32_t* row_offset = nullptr;
};

// A row whose token is its argmax and that reports no logprobs: it needs no probabilities, no
// select and no draw.
__host__ __device__ inline bool ArgmaxOnly(const SlotSampling& s) {
  return s.temperature == 0.0f && s.want_logprob == 0 && s.num_top_logprobs == 0;
}

struct IdRange {
  int32_t begin;
  int32_t end;  // exclusive
};

__host__ __device__ inline int32_t SampleChunks(int32_t n) {
  const int32_t c = (n + kSampleChunkIds - 1) / kSampleChunkIds;
  return c < 1 ? 1 : (c > kMaxSampleChunks ? kMaxSampleChunks : c);
}

// Ids [begin, end) of chunk `c` of `chunks` over n ids.
__host__ __device__ inline IdRange SampleChunkRange(int32_t n, int32_t chunks, int32_t c) {
  const int32_t size = (n + chunks - 1) / chunks;
  const int32_t begin = c * size < n ? c * size : n;
  return {begin, begin + size < n ? begin + size : n};
}

// The argmax order: a larger value, or an equal one at a lower id (NaN never wins).
__host__ __device__ inline bool ArgmaxBetter(float v, int32_t id, float best_v, int32_t best_id) {
  return v > best_v || (v == best_v && id < best_id);
}

// The top logprobs are the logits in ArgmaxBetter order, from the sentinel (-FLT_MAX, kNoTopId):
// NaN and -inf are never listed. A list is built by repeatedly taking the best (v, id) that
// comes strictly after the last one taken, so no list of taken ids is searched.
inline constexpr int32_t kNoTopId = 0x7fffffff;
__host__ __device__ inline bool TopLogprobAfter(float v, int32_t id, float prev_v,
                                                int32_t prev_id) {
  return ArgmaxBetter(prev_v, prev_id, v, id);
}

cudaError_t LaunchSample(const SampleParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_SAMPLING_SAMPLING_H_
