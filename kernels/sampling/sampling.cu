// The split sampler. Per launch, over a grid of (rows, vocabulary chunks) blocks:
//   1. ResetPenaltiesArgmaxKernel: resets the row's workspace; penalties in place; each chunk's
//      (maximum logit, lowest id).
//   2. ProbsKernel: p = FastExp((l - max) / T) and each chunk's sum; the first select level's
//      histogram. The row's last block sums the chunks (the logprob normaliser) and advances
//      the select.
//   3. SelectKernel, kSelectPasses - 1 times: the next level's histogram, then the row's last
//      block advances the select (a row with nothing left to select returns at once).
//   4. KeptMassKernel: each chunk's kept mass; the row's last block draws u and picks the chunk.
//   5. DrawKernel, a block per row: the token inside the chosen chunk (or the argmax), the
//      logprobs, the append and the stop check.
// Pass 1 applies a constrained row's bitmask first. A row that is ArgmaxOnly (sampling.h)
// returns at once from 2 to 4; a launch whose rows all are (SampleParams::argmax_only) runs only
// 1 and 5.
// "The row's last block" is the block whose arrival on the row's counter completes it (after a
// fence), so it sees every block's histogram and sums; what it reduces is integers or values in
// chunk order, so which block is last changes nothing.
#include <cfloat>
#include <climits>

#include "common/fast_exp.h"
#include "common/logit_arithmetic.h"
#include "common/philox.h"
#include "kernels/common.cuh"
#include "kernels/launch.cuh"
#include "kernels/sampling/append.h"
#include "kernels/sampling/sampling.h"

namespace llm::kernels {
namespace {

constexpr int kThreads = 1024;      // DrawKernel
constexpr int kChunkThreads = 256;  // the chunk kernels
constexpr int kBucketsPerThread = kDigitBuckets / kChunkThreads;
static_assert(kDigitBuckets % kChunkThreads == 0, "a select thread scans whole buckets");
static_assert(kSelectPasses == 6, "LaunchSample's pass list assumes two selects of three levels");

struct ChunkShared {
  uint64_t count[kDigitBuckets];
  uint64_t mass[kDigitBuckets];
  uint64_t scan[33];
  double d[32];
  Crossing crossing;
  float max_logit;
  int32_t found;
  int32_t last;
};

struct DrawShared {
  // The chunks' top-logprob lists (SampleRowWork::top_v, top_i), staged for the merge.
  float top_v[kMaxSampleChunks][kMaxTopLogprobs];
  int32_t top_i[kMaxSampleChunks][kMaxTopLogprobs];
  double d[33];
  int32_t i[33];
  float best_v[32];
  int32_t best_i[32];
  int32_t top_ids[kMaxTopLogprobs];
  int32_t chosen;
  int32_t last_kept;
};

__device__ __forceinline__ void AddU64(uint64_t* a, uint64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(a), static_cast<unsigned long long>(v));
}

__device__ __forceinline__ uint64_t LoadU64(const uint64_t* a) {
  return __ldcg(reinterpret_cast<const unsigned long long*>(a));
}

// The warp's (value, id) maximum under ArgmaxBetter, in every lane.
__device__ __forceinline__ void WarpArgmax(float& bv, int32_t& bi) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, offset);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, offset);
    if (ArgmaxBetter(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
}

template <typename T>
__device__ __forceinline__ T WarpInclusiveScan(T v) {
  const int lane = threadIdx.x % 32;
  for (int offset = 1; offset < 32; offset *= 2) {
    const T other = __shfl_up_sync(0xffffffffu, v, offset);
    if (lane >= offset) v += other;
  }
  return v;
}

// Exclusive prefix of v over the block in thread order, the additions in a fixed order; every
// thread gets the block's sum in `total`. blockDim.x is a multiple of 32; `scratch` holds 33.
template <typename T>
__device__ T BlockExclusiveScan(T v, T* scratch, T* total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const T inclusive = WarpInclusiveScan(v);
  T exclusive = __shfl_up_sync(0xffffffffu, inclusive, 1);
  if (lane == 0) exclusive = T(0);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 31) scratch[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const T s = lane < warps ? scratch[lane] : T(0);
    const T si = WarpInclusiveScan(s);
    T se = __shfl_up_sync(0xffffffffu, si, 1);
    if (lane == 0) se = T(0);
    if (lane < warps) scratch[lane] = se;
    if (lane == 31) scratch[32] = si;
  }
  __syncthreads();
  *total = scratch[32];
  return scratch[warp] + exclusive;
}

// The block's (value, id) maximum under ArgmaxBetter, in every thread, from each thread's own;
// `sv` and `si` hold one per warp.
__device__ void BlockArgmaxAll(float& bv, int32_t& bi, float* sv, int32_t* si) {
  WarpArgmax(bv, bi);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warps = static_cast<int>(blockDim.x / 32);
  __syncthreads();  // sv and si may still be read by a previous call
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  __syncthreads();
  bv = lane < warps ? sv[lane] : -FLT_MAX;
  bi = lane < warps ? si[lane] : kNoTopId;
  WarpArgmax(bv, bi);
}

// The row's maximum logit and its lowest id: the chunks' maxima in chunk order (as one pass).
__device__ void RowMax(const SampleRowWork* w, int32_t chunks, float* max_logit, int32_t* argmax) {
  float bv = -INFINITY;
  int32_t bi = INT32_MAX;
  for (int32_t c = 0; c < chunks; ++c) {
    const float v = w->chunk_max[c];
    const int32_t i = w->chunk_arg[c];
    if (ArgmaxBetter(v, i, bv, bi)) {
      bv = v;
      bi = i;
    }
  }
  *max_logit = bv;
  *argmax = bi;
}

// Whether this block is the last of the row's `blocks` to arrive on `counter`; if so, every
// other block's global writes and atomics before its arrival are visible to it.
__device__ bool ArriveLast(uint32_t* counter, uint32_t blocks, ChunkShared& sh) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) sh.last = atomicAdd(counter, 1u) == blocks - 1 ? 1 : 0;
  __syncthreads();
  const bool last = sh.last != 0;
  if (last) __threadfence();
  return last;
}

// This chunk's histogram of the select level's digit (count and mass per bucket), added to the
// row's. Integer atomics: the row's histogram does not depend on the order of arrival.
__device__ void AddHistogram(const float* probs, IdRange r, const SampleRowState& st,
                             ChunkShared& sh, SampleRowWork* w) {
  for (int b = threadIdx.x; b < kDigitBuckets; b += blockDim.x) {
    sh.count[b] = 0;
    sh.mass[b] = 0;
  }
  __syncthreads();
  for (int32_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) {
    const float p = probs[i];
    const uint32_t key = ProbKey(p);
    if (!InSelect(p, key, st)) continue;
    const int b = DigitOf(key, st.level);
    AddU64(&sh.count[b], 1);
    AddU64(&sh.mass[b], FixedMass(p));
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kDigitBuckets; b += blockDim.x) {
    if (sh.count[b] == 0) continue;
    AddU64(&w->count[b], sh.count[b]);
    AddU64(&w->mass[b], sh.mass[b]);
  }
}

// In the row's last block: the level's crossing bucket from the row's histogram (which it
// clears for the next level), and the state advanced (FinishLevel). Thread t scans buckets
// [1023 - 4t - 3, 1023 - 4t] with the weight above them from a block scan.
__device__ void SelectLevel(SampleRowWork* w, const SlotSampling& s, ChunkShared& sh) {
  for (int b = threadIdx.x; b < kDigitBuckets; b += blockDim.x) {
    sh.count[b] = LoadU64(&w->count[b]);
    sh.mass[b] = LoadU64(&w->mass[b]);
    w->count[b] = 0;
    w->mass[b] = 0;
  }
  if (threadIdx.x == 0) sh.found = 0;
  __syncthreads();
  SampleRowState st = w->state;
  const int hi = kDigitBuckets - 1 - static_cast<int>(threadIdx.x) * kBucketsPerThread;
  const int lo = hi - kBucketsPerThread + 1;
  uint64_t c = 0, m = 0;
  for (int b = lo; b <= hi; ++b) {
    c += sh.count[b];
    m += sh.mass[b];
  }
  uint64_t total_c, total_m;
  const uint64_t c_above = BlockExclusiveScan(c, sh.scan, &total_c);
  const uint64_t m_above = BlockExclusiveScan(m, sh.scan, &total_m);
  const uint64_t need = SelectNeed(st, s.top_p, total_m);
  const bool by_mass = st.stage == kStageTopP;
  Crossing crossing;
  if (FindCrossing(sh.count, sh.mass, by_mass, hi, lo, by_mass ? m_above : c_above, c_above,
                   m_above, need, &crossing)) {
    sh.crossing = crossing;  // one thread: the one whose buckets hold the crossing
    sh.found = 1;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    FinishLevel(st, s.top_p, sh.found != 0, sh.crossing, total_m);
    w->state = st;
  }
}

// The slot row `row` samples for, or -1 for a row that samples nothing (padding, or a slot
// already finished: the pipeline's extra step); every kernel skips those.
__device__ __forceinline__ int32_t SamplingSlot(const SampleParams& p, int32_t row) {
  const int32_t slot = p.row_slot[row];
  return slot < 0 || p.slots.done[slot] ? -1 : slot;
}

// Grid (rows, chunks).
__global__ void __launch_bounds__(kChunkThreads) ResetPenaltiesArgmaxKernel(SampleParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  __shared__ float best_v[kChunkThreads / 32];
  __shared__ int32_t best_i[kChunkThreads / 32];
  const int32_t row = blockIdx.x, chunk = blockIdx.y;
  const int32_t slot = SamplingSlot(p, row);
  if (slot < 0) return;
  const SlotSampling& s = p.slots.sampling[slot];
  SampleRowWork* w = p.work + row;
  for (int b = chunk * blockDim.x + threadIdx.x; b < kDigitBuckets; b += gridDim.y * blockDim.x) {
    w->count[b] = 0;
    w->mass[b] = 0;
  }
  if (chunk == 0 && threadIdx.x == 0) {
    w->state = StartRow(s.temperature, s.top_k, s.top_p, p.valid_vocab);
    for (int k = 0; k < kSampleArrivals; ++k) w->arrived[k] = 0;
  }
  float* logits = p.logits + static_cast<int64_t>(row) * p.vocab;
  const IdRange range = SampleChunkRange(p.valid_vocab, gridDim.y, chunk);
  // From -inf, as the CPU sampler's maximum: a row of -inf gets max -inf and argmax 0 (and then
  // the same uniform draw); NaN never wins.
  float bv = -INFINITY;
  int32_t bi = INT32_MAX;
  const uint16_t* counts = p.slots.out_counts + static_cast<int64_t>(slot) * p.vocab;
  // A verify row past its group's first counts the proposals before it (GroupOutputCount).
  const int32_t offset = p.row_offset != nullptr && s.has_penalties ? p.row_offset[row] : 0;
  const uint8_t* mask = p.slots.prompt_mask + static_cast<int64_t>(slot) * p.vocab;
  const int32_t mask_k = p.mask_index != nullptr ? p.mask_index[row] : -1;
  const uint64_t* allowed =
      mask_k >= 0 ? p.masks + static_cast<int64_t>(mask_k) * p.mask_words : nullptr;
#pragma unroll 4
  for (int32_t i = range.begin + threadIdx.x; i < range.end; i += blockDim.x) {
    float l = logits[i];
    if (allowed != nullptr && ((allowed[i / 64] >> (i % 64)) & 1) == 0) {
      // Forbidden by the row's constraint: -inf, which no penalty changes.
      l = -INFINITY;
      logits[i] = l;
    } else if (s.has_penalties) {
      const int32_t c = offset > 0 ? GroupOutputCount(p.slots, slot, offset, i, p.vocab)
                                   : static_cast<int32_t>(counts[i]);
      if (s.repetition_penalty != 1.0f && (mask[i] != 0 || c > 0)) {
        l = sampling::RepetitionPenalised(l, s.repetition_penalty);
      }
      // Rounded as the CPU sampler computes it (no fused multiply-add).
      if (c > 0) {
        l = __fsub_rn(l, __fadd_rn(s.presence_penalty,
                                   __fmul_rn(s.frequency_penalty, static_cast<float>(c))));
      }
      logits[i] = l;
    }
    if (ArgmaxBetter(l, i, bv, bi)) {
      bv = l;
      bi = i;
    }
  }
  WarpArgmax(bv, bi);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    best_v[warp] = bv;
    best_i[warp] = bi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int k = 1; k < kChunkThreads / 32; ++k) {
      if (ArgmaxBetter(best_v[k], best_i[k], bv, bi)) {
        bv = best_v[k];
        bi = best_i[k];
      }
    }
    w->chunk_max[chunk] = bv;
    w->chunk_arg[chunk] = bi;
  }
  // The chunk's top-logprob candidates (of the penalised logits: each thread reads the ids it
  // wrote): round k takes the block's best logit after round k - 1's.
  const int top = p.argmax_only ? 0 : s.num_top_logprobs;
  float prev_v = -FLT_MAX;
  int32_t prev_i = kNoTopId;
  for (int k = 0; k < top; ++k) {
    float v = -FLT_MAX;
    int32_t id = kNoTopId;
    for (int32_t i = range.begin + threadIdx.x; i < range.end; i += blockDim.x) {
      const float l = logits[i];
      if ((k == 0 || TopLogprobAfter(l, i, prev_v, prev_i)) && ArgmaxBetter(l, i, v, id)) {
        v = l;
        id = i;
      }
    }
    BlockArgmaxAll(v, id, best_v, best_i);
    if (threadIdx.x == 0) {
      w->top_v[chunk][k] = v;
      w->top_i[chunk][k] = id;
    }
    if (id == kNoTopId) break;  // the chunk has no more (the block agrees)
    prev_v = v;
    prev_i = id;
  }
}

__global__ void __launch_bounds__(kChunkThreads) ProbsKernel(SampleParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  __shared__ ChunkShared sh;
  const int32_t row = blockIdx.x, chunk = blockIdx.y, chunks = gridDim.y;
  const int32_t slot = SamplingSlot(p, row);
  if (slot < 0) return;
  const SlotSampling& s = p.slots.sampling[slot];
  if (ArgmaxOnly(s)) return;
  SampleRowWork* w = p.work + row;
  if (threadIdx.x == 0) {
    int32_t unused;
    RowMax(w, chunks, &sh.max_logit, &unused);
  }
  __syncthreads();
  const float max_logit = sh.max_logit;
  const float inv_t = sampling::InverseTemperature(s.temperature);
  const IdRange r = SampleChunkRange(p.valid_vocab, chunks, chunk);
  const float* logits = p.logits + static_cast<int64_t>(row) * p.vocab;
  float* probs = p.probs + static_cast<int64_t>(row) * p.vocab;
  double partial = 0.0;
  for (int32_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) {
    const float e = FastExp((logits[i] - max_logit) * inv_t);
    probs[i] = e;
    partial += e;
  }
  const double sum = BlockSumDouble(partial, sh.d);
  if (threadIdx.x == 0) w->chunk_mass[chunk] = sum;
  const SampleRowState st = w->state;
  const bool select = st.stage != kStageDone;
  __syncthreads();
  if (select) AddHistogram(probs, r, st, sh, w);
  if (!ArriveLast(&w->arrived[0], chunks, sh)) return;
  if (select) SelectLevel(w, s, sh);
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int32_t c = 0; c < chunks; ++c) total += __ldcg(&w->chunk_mass[c]);
    w->state.total = total;
  }
}

__global__ void __launch_bounds__(kChunkThreads) SelectKernel(SampleParams p, int pass) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  __shared__ ChunkShared sh;
  const int32_t row = blockIdx.x, chunk = blockIdx.y, chunks = gridDim.y;
  const int32_t slot = SamplingSlot(p, row);
  if (slot < 0) return;
  SampleRowWork* w = p.work + row;
  const SampleRowState st = w->state;
  if (st.stage == kStageDone) return;
  const SlotSampling& s = p.slots.sampling[slot];
  const IdRange r = SampleChunkRange(p.valid_vocab, chunks, chunk);
  const float* probs = p.probs + static_cast<int64_t>(row) * p.vocab;
  AddHistogram(probs, r, st, sh, w);
  if (!ArriveLast(&w->arrived[pass], chunks, sh)) return;
  SelectLevel(w, s, sh);
}

__global__ void __launch_bounds__(kChunkThreads) KeptMassKernel(SampleParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  __shared__ ChunkShared sh;
  const int32_t row = blockIdx.x, chunk = blockIdx.y, chunks = gridDim.y;
  const int32_t slot = SamplingSlot(p, row);
  if (slot < 0) return;
  const SlotSampling& s = p.slots.sampling[slot];
  if (s.temperature == 0.0f) return;
  SampleRowWork* w = p.work + row;
  SampleRowState st = w->state;
  const IdRange r = SampleChunkRange(p.valid_vocab, chunks, chunk);
  const float* probs = p.probs + static_cast<int64_t>(row) * p.vocab;
  double partial = 0.0;
  int32_t eq = 0;
  for (int32_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) {
    const float q = probs[i];
    const uint32_t key = ProbKey(q);
    if (KeptAbove(q, key, st, s.min_p)) partial += q;
    if (AtEqKey(q, key, st)) ++eq;
  }
  const double mass = BlockSumDouble(partial, sh.d);
  const double eq_total = BlockSumDouble(static_cast<double>(eq), sh.d);  // exact: < 2^53
  if (threadIdx.x == 0) {
    w->chunk_mass[chunk] = mass;
    w->chunk_eq[chunk] = static_cast<int32_t>(eq_total);
  }
  if (!ArriveLast(&w->arrived[kSelectPasses], chunks, sh)) return;
  if (threadIdx.x == 0) {
    double masses[kMaxSampleChunks];
    int32_t eqs[kMaxSampleChunks];
    for (int32_t c = 0; c < chunks; ++c) {
      masses[c] = __ldcg(&w->chunk_mass[c]);
      eqs[c] = __ldcg(&w->chunk_eq[c]);
    }
    const int32_t offset = p.row_offset != nullptr ? p.row_offset[row] : 0;
    const uint64_t counter = static_cast<uint64_t>(p.slots.generated[slot] + offset);
    ChooseChunk(st, masses, eqs, chunks, UniformDouble(s.seed, counter), s.min_p);
    w->state = st;
  }
}

__global__ void __launch_bounds__(kThreads) DrawKernel(SampleParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  __shared__ DrawShared sh;
  const int32_t row = blockIdx.x;
  SampleOutput& out = p.out[row];
  const int32_t slot = p.row_slot[row];
  if (slot < 0 || p.slots.done[slot]) {
    if (threadIdx.x == 0) {
      out.key = slot < 0 ? 0 : p.slots.sampling[slot].key;
      out.slot = -1;
      out.token = -1;
      out.finish = sampling::FinishReason::kNone;
      out.num_top = 0;
      out.draft_tokens = 0;
      out.accepted_tokens = 0;
    }
    return;
  }
  const SlotSampling& s = p.slots.sampling[slot];
  const SampleRowWork* w = p.work + row;
  const float* logits = p.logits + static_cast<int64_t>(row) * p.vocab;
  const int32_t n = p.valid_vocab;
  const int32_t chunks = SampleChunks(n);

  // The maximum (and argmax, ties to the lowest id).
  if (threadIdx.x == 0) {
    RowMax(w, chunks, &sh.best_v[0], &sh.best_i[0]);
    sh.chosen = INT32_MAX;
    sh.last_kept = -1;
  }
  __syncthreads();
  const float max_logit = sh.best_v[0];
  int32_t argmax = sh.best_i[0];
  __syncthreads();
  // Logits that are all NaN or -inf leave no maximum: token 0, as the CPU sampler's Argmax.
  if (argmax >= n) argmax = 0;
  // An argmax-only launch ran no other kernel: every row takes its argmax, without logprobs.
  const bool greedy = p.argmax_only || s.temperature == 0.0f;
  const float inv_t = greedy ? 1.0f : sampling::InverseTemperature(s.temperature);
  const bool need_probs = !p.argmax_only && !ArgmaxOnly(s);
  const SampleRowState st = w->state;

  int32_t token = argmax;
  if (!greedy && st.chosen_chunk >= 0) {
    // The draw inside the chosen chunk: contiguous ids per thread; the ranks at eq_key and the
    // kept mass before each thread's ids by block scans (fixed order); the first thread that
    // finds u wins, else the chunk's last kept id (rounding put u past the chunk's own sum).
    const float* probs = p.probs + static_cast<int64_t>(row) * p.vocab;
    const IdRange r = SampleChunkRange(n, chunks, st.chosen_chunk);
    const int32_t per = (r.end - r.begin + kThreads - 1) / kThreads;
    const int32_t begin = min(r.end, r.begin + static_cast<int32_t>(threadIdx.x) * per);
    const int32_t end = min(r.end, begin + per);
    int32_t eq = 0;
    for (int32_t i = begin; i < end; ++i) eq += AtEqKey(probs[i], ProbKey(probs[i]), st) ? 1 : 0;
    int32_t eq_total;
    const int32_t rank = st.eq_before + BlockExclusiveScan(eq, sh.i, &eq_total);
    double mine = 0.0;
    int32_t last = -1;
    {
      uint64_t k = static_cast<uint64_t>(rank);
      for (int32_t i = begin; i < end; ++i) {
        const float q = probs[i];
        const uint32_t key = ProbKey(q);
        if (Kept(q, key, k, st, s.min_p)) {
          mine += q;
          last = i;
        }
        if (AtEqKey(q, key, st)) ++k;
      }
    }
    double chunk_kept;
    const double cum = st.cum_before + BlockExclusiveScan(mine, sh.d, &chunk_kept);
    // Only threads whose ids start at or below u search; when rounding lets u slip past a
    // thread's own sum and the next thread's start, the fallback is the last kept id of the
    // threads that searched (next to u), as the CPU sampler's chunk fallback.
    if (mine > 0.0 && cum <= st.u) {
      int32_t unused = -1;
      const int32_t found =
          DrawInRange(probs, begin, end, st, s.min_p, static_cast<uint64_t>(rank), cum, &unused);
      if (found >= 0) atomicMin(&sh.chosen, found);
      atomicMax(&sh.last_kept, last);
    }
    __syncthreads();
    token = sh.chosen != INT32_MAX ? sh.chosen : (sh.last_kept >= 0 ? sh.last_kept : argmax);
  }

  // Logprobs (of logits / T before filtering, as the CPU sampler reports them).
  const double log_total = need_probs ? log(st.total) : 0.0;
  int32_t num_top = 0;
  if (need_probs && s.num_top_logprobs > 0) {  // the same for the whole block
    // The chunks' lists (ResetPenaltiesArgmaxKernel's) into shared memory, all loads at once
    // (entries past a list's end are copied but never used); then warp 0 merges them: lane c
    // holds chunk c's next candidate, the warp's best is the row's next, and its lane moves on.
    // Thread 0 keeps the list and its length.
    const int top = min(s.num_top_logprobs, n);
    for (int e = threadIdx.x; e < chunks * top; e += blockDim.x) {
      sh.top_v[e / top][e % top] = w->top_v[e / top][e % top];
      sh.top_i[e / top][e % top] = w->top_i[e / top][e % top];
    }
    __syncthreads();
    const int lane = static_cast<int>(threadIdx.x);
    int head = 0;
    for (int k = 0; k < top && lane < 32; ++k) {  // warp 0 only
      float v = -FLT_MAX;
      int32_t id = kNoTopId;
      if (lane < chunks && head < top) {
        v = sh.top_v[lane][head];
        id = sh.top_i[lane][head];
      }
      float bv = v;
      int32_t bi = id;
      WarpArgmax(bv, bi);
      if (bi == kNoTopId) break;  // every list is spent (only NaN or -inf left)
      if (id == bi) ++head;
      if (lane == 0) sh.top_ids[k] = bi;
      ++num_top;
    }
  }

  // Append and stop detection (deferred to LaunchVerify for a verify group's rows).
  if (threadIdx.x == 0) {
    const sampling::FinishReason finish =
        p.row_offset != nullptr ? sampling::FinishReason::kNone
                                : AppendToken(p.slots, slot, token, p.row_pos[row], p.vocab);
    out.key = s.key;
    out.slot = slot;
    out.token = token;
    out.finish = finish;
    out.logprob =
        need_probs ? static_cast<float>((logits[token] - max_logit) * inv_t - log_total) : 0.0f;
    out.num_top = num_top;
    out.draft_tokens = 0;
    out.accepted_tokens = 0;
    for (int k = 0; k < num_top; ++k) {
      const int32_t id = sh.top_ids[k];
      out.top_ids[k] = id;
      out.top_logprobs[k] = static_cast<float>((logits[id] - max_logit) * inv_t - log_total);
    }
  }
}

}  // namespace

cudaError_t LaunchSample(const SampleParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;
  if (p.work == nullptr) return cudaErrorInvalidValue;
  const dim3 grid(p.rows, SampleChunks(p.valid_vocab));
  cudaError_t err = Launch(ResetPenaltiesArgmaxKernel, grid, kChunkThreads, 0, stream, p);
  if (!p.argmax_only) {
    if (err == cudaSuccess) err = Launch(ProbsKernel, grid, kChunkThreads, 0, stream, p);
    for (int pass = 1; pass < kSelectPasses && err == cudaSuccess; ++pass) {
      err = Launch(SelectKernel, grid, kChunkThreads, 0, stream, p, pass);
    }
    if (err == cudaSuccess) err = Launch(KeptMassKernel, grid, kChunkThreads, 0, stream, p);
  }
  if (err == cudaSuccess) err = Launch(DrawKernel, p.rows, kThreads, 0, stream, p);
  return err;
}

}  // namespace llm::kernels
