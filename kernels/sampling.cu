#include <cfloat>

#include "common/fast_exp.h"
#include "common/philox.h"
#include "kernels/common.cuh"
#include "kernels/sampling.h"

namespace llm::kernels {
namespace {

constexpr int kThreads = 1024;

struct Shared {
  float f[32];
  double d[32];
  int32_t i[32];
  float best_v[32];
  int32_t best_i[32];
  int32_t top_ids[kMaxTopLogprobs];
  double chunk_sum[kThreads];
  int32_t chunk_count[kThreads];
  int32_t chosen;
};

__device__ __forceinline__ uint32_t Key(float p) { return __float_as_uint(p); }  // p >= 0

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

// Block-wide (value, id) maximum, ties to the lowest id; ids in `exclude` (n of them) skipped.
__device__ void BlockArgmax(const float* v, int32_t n, const int32_t* exclude, int num_exclude,
                            Shared& sh, float* best_value, int32_t* best_id) {
  float bv = -FLT_MAX;
  int32_t bi = INT32_MAX;
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
    bool skip = false;
    for (int e = 0; e < num_exclude; ++e) skip = skip || exclude[e] == i;
    if (skip) continue;
    if (ArgmaxBetter(v[i], i, bv, bi)) {
      bv = v[i];
      bi = i;
    }
  }
  WarpArgmax(bv, bi);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) {
    sh.best_v[warp] = bv;
    sh.best_i[warp] = bi;
  }
  __syncthreads();
  if (warp == 0) {
    bv = lane < static_cast<int>(blockDim.x / 32) ? sh.best_v[lane] : -FLT_MAX;
    bi = lane < static_cast<int>(blockDim.x / 32) ? sh.best_i[lane] : INT32_MAX;
    WarpArgmax(bv, bi);
    if (lane == 0) {
      sh.best_v[0] = bv;
      sh.best_i[0] = bi;
    }
  }
  __syncthreads();
  *best_value = sh.best_v[0];
  *best_id = sh.best_i[0];
}

// Count and mass of probabilities whose key is >= `threshold` (strided; fixed-order sums).
__device__ void CountMassAtLeast(const float* p, int32_t n, uint32_t threshold, Shared& sh,
                                 int32_t* count, double* mass) {
  int32_t c = 0;
  double m = 0.0;
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
    if (p[i] > 0.0f && Key(p[i]) >= threshold) {
      ++c;
      m += p[i];
    }
  }
  // Integer sum via float-free path: reuse BlockSumDouble for both (exact for counts < 2^53).
  *count = static_cast<int32_t>(BlockSumDouble(static_cast<double>(c), sh.d));
  *mass = BlockSumDouble(m, sh.d);
}

// Keeps only the first `need` (in id order) of the probabilities whose key equals `t`, and
// every probability above it; zeroes the rest. Threads own contiguous chunks of ids.
__device__ void KeepAboveAndFirstEquals(float* p, int32_t n, uint32_t t, int32_t need, Shared& sh) {
  const int32_t chunk = (n + blockDim.x - 1) / blockDim.x;
  const int32_t begin = min(n, static_cast<int32_t>(threadIdx.x) * chunk);
  const int32_t end = min(n, begin + chunk);
  int32_t eq = 0;
  for (int32_t i = begin; i < end; ++i) eq += (p[i] > 0.0f && Key(p[i]) == t) ? 1 : 0;
  sh.chunk_count[threadIdx.x] = eq;
  __syncthreads();
  // Exclusive prefix over the chunks, by one thread (1024 adds): simple and deterministic.
  if (threadIdx.x == 0) {
    int32_t run = 0;
    for (int k = 0; k < static_cast<int>(blockDim.x); ++k) {
      const int32_t c = sh.chunk_count[k];
      sh.chunk_count[k] = run;
      run += c;
    }
  }
  __syncthreads();
  int32_t rank = sh.chunk_count[threadIdx.x];
  for (int32_t i = begin; i < end; ++i) {
    if (p[i] <= 0.0f) continue;
    const uint32_t k = Key(p[i]);
    if (k > t) continue;
    if (k == t && rank < need) {
      ++rank;
      continue;
    }
    if (k == t) ++rank;
    p[i] = 0.0f;
  }
  __syncthreads();
}

// The largest key t with count(key >= t) >= k (by bisection; counts are exact).
__device__ uint32_t KthLargestKey(const float* p, int32_t n, int32_t k, Shared& sh) {
  uint32_t lo = 0, hi = Key(1.0f);  // invariant: count(>= lo) >= k
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo + 1) / 2;
    int32_t c;
    double m;
    CountMassAtLeast(p, n, mid, sh, &c, &m);
    if (c >= k) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// The largest key t with mass(key >= t) >= target.
__device__ uint32_t MassThresholdKey(const float* p, int32_t n, double target, Shared& sh) {
  uint32_t lo = 1, hi = Key(1.0f);  // keys of positive probabilities; mass(>= 1) = all kept
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo + 1) / 2;
    int32_t c;
    double m;
    CountMassAtLeast(p, n, mid, sh, &c, &m);
    if (m >= target) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

constexpr int kChunkThreads = 256;

// Grid (rows, chunks): a chunk of one row's vocabulary gets the request's penalties (in place)
// and its (maximum, lowest id). Rows that sample nothing are skipped, as in SampleKernel.
__global__ void __launch_bounds__(kChunkThreads) PenaltiesArgmaxKernel(SampleParams p) {
  __shared__ float best_v[kChunkThreads / 32];
  __shared__ int32_t best_i[kChunkThreads / 32];
  const int32_t row = blockIdx.x, chunk = blockIdx.y;
  const int32_t slot = p.row_slot[row];
  if (slot < 0 || p.slots.done[slot]) return;
  const SlotSampling& s = p.slots.sampling[slot];
  float* logits = p.logits + static_cast<int64_t>(row) * p.vocab;
  const IdRange range = SampleChunkRange(p.valid_vocab, gridDim.y, chunk);
  float bv = -FLT_MAX;
  int32_t bi = INT32_MAX;
  const uint16_t* counts = p.slots.out_counts + static_cast<int64_t>(slot) * p.vocab;
  const uint8_t* mask = p.slots.prompt_mask + static_cast<int64_t>(slot) * p.vocab;
#pragma unroll 4
  for (int32_t i = range.begin + threadIdx.x; i < range.end; i += blockDim.x) {
    float l = logits[i];
    if (s.has_penalties) {
      const int32_t c = counts[i];
      if (s.repetition_penalty != 1.0f && (mask[i] != 0 || c > 0)) {
        l = l > 0.0f ? l / s.repetition_penalty : l * s.repetition_penalty;
      }
      if (c > 0) l -= s.presence_penalty + s.frequency_penalty * static_cast<float>(c);
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
    for (int w = 1; w < kChunkThreads / 32; ++w) {
      if (ArgmaxBetter(best_v[w], best_i[w], bv, bi)) {
        bv = best_v[w];
        bi = best_i[w];
      }
    }
    p.chunk_max[static_cast<int64_t>(row) * kMaxSampleChunks + chunk] = bv;
    p.chunk_arg[static_cast<int64_t>(row) * kMaxSampleChunks + chunk] = bi;
  }
}

__global__ void __launch_bounds__(kThreads) SampleKernel(SampleParams p) {
  __shared__ Shared sh;
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
    }
    return;
  }
  const SlotSampling& s = p.slots.sampling[slot];
  float* logits = p.logits + static_cast<int64_t>(row) * p.vocab;
  float* probs = p.probs + static_cast<int64_t>(row) * p.vocab;
  const int32_t n = p.valid_vocab;
  const uint64_t counter = static_cast<uint64_t>(p.slots.generated[slot]);

  // 1. Penalties: applied by PenaltiesArgmaxKernel.
  // 2. The maximum (and argmax, ties to the lowest id): the chunks' maxima in id order.
  if (threadIdx.x == 0) {
    float bv = -FLT_MAX;
    int32_t bi = INT32_MAX;
    for (int32_t c = 0; c < SampleChunks(n); ++c) {
      const float v = p.chunk_max[static_cast<int64_t>(row) * kMaxSampleChunks + c];
      const int32_t i = p.chunk_arg[static_cast<int64_t>(row) * kMaxSampleChunks + c];
      if (ArgmaxBetter(v, i, bv, bi)) {
        bv = v;
        bi = i;
      }
    }
    sh.best_v[0] = bv;
    sh.best_i[0] = bi;
  }
  __syncthreads();
  float max_logit = sh.best_v[0];
  int32_t argmax = sh.best_i[0];
  __syncthreads();
  // Logits that are all NaN or -inf leave no maximum: token 0, as the CPU sampler's Argmax.
  if (argmax >= n) argmax = 0;
  const bool greedy = s.temperature == 0.0f;
  const float inv_t = greedy ? 1.0f : 1.0f / s.temperature;

  // 3. Probabilities (needed for sampling and for logprobs).
  const bool need_probs = !greedy || s.want_logprob || s.num_top_logprobs > 0;
  double total = 0.0;
  if (need_probs) {
    double partial = 0.0;
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float e = FastExp((logits[i] - max_logit) * inv_t);
      probs[i] = e;
      partial += e;
    }
    total = BlockSumDouble(partial, sh.d);
    __syncthreads();
  }

  int32_t token = argmax;
  if (!greedy) {
    // 4. Top-k, top-p, min-p as a mask over probs (a dropped token gets 0).
    if (s.top_k > 0 && s.top_k < n) {
      const uint32_t t = KthLargestKey(probs, n, s.top_k, sh);
      int32_t above;
      double mass;
      CountMassAtLeast(probs, n, t + 1, sh, &above, &mass);
      KeepAboveAndFirstEquals(probs, n, t, s.top_k - above, sh);
    }
    if (s.top_p < 1.0f) {
      int32_t c;
      double kept;
      CountMassAtLeast(probs, n, 1, sh, &c, &kept);
      const double target = static_cast<double>(s.top_p) * kept;
      const uint32_t t = MassThresholdKey(probs, n, target, sh);
      double above;
      int32_t count_above;
      CountMassAtLeast(probs, n, t + 1, sh, &count_above, &above);
      // Equal probabilities join in id order until the mass reaches the target (at least one).
      const double pt = __uint_as_float(t);
      int32_t need = static_cast<int32_t>(ceil((target - above) / pt));
      if (need < 1) need = 1;
      KeepAboveAndFirstEquals(probs, n, t, need, sh);
    }
    if (s.min_p > 0.0f) {
      for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
        if (probs[i] < s.min_p) probs[i] = 0.0f;
      }
      __syncthreads();
    }
    // 5. Inverse CDF in id order: contiguous chunks per thread, prefix over chunk sums.
    const int32_t chunk = (n + blockDim.x - 1) / blockDim.x;
    const int32_t begin = min(n, static_cast<int32_t>(threadIdx.x) * chunk);
    const int32_t end = min(n, begin + chunk);
    double mine = 0.0;
    for (int32_t i = begin; i < end; ++i) mine += probs[i];
    sh.chunk_sum[threadIdx.x] = mine;
    if (threadIdx.x == 0) sh.chosen = -1;
    __syncthreads();
    if (threadIdx.x == 0) {
      double run = 0.0;
      for (int k = 0; k < static_cast<int>(blockDim.x); ++k) {
        const double c = sh.chunk_sum[k];
        sh.chunk_sum[k] = run;
        run += c;
      }
      sh.d[0] = run;  // total kept mass
    }
    __syncthreads();
    const double kept_total = sh.d[0];
    const double u = UniformDouble(s.seed, counter) * kept_total;
    double cum = sh.chunk_sum[threadIdx.x];
    if (mine > 0.0 && cum <= u && u < cum + mine) {
      int32_t last = -1;
      for (int32_t i = begin; i < end; ++i) {
        if (probs[i] <= 0.0f) continue;
        last = i;
        cum += probs[i];
        if (cum > u) break;
      }
      sh.chosen = last;
    }
    __syncthreads();
    if (sh.chosen < 0 && threadIdx.x == 0) {
      // Rounding put u at the very top: the last kept token (as the CPU sampler does).
      for (int32_t i = n - 1; i >= 0; --i) {
        if (probs[i] > 0.0f) {
          sh.chosen = i;
          break;
        }
      }
    }
    __syncthreads();
    token = sh.chosen >= 0 ? sh.chosen : argmax;
  }

  // 6. Logprobs (of logits / T before filtering, as the CPU sampler reports them).
  const double log_total = need_probs ? log(total) : 0.0;
  int32_t num_top = 0;
  if (s.num_top_logprobs > 0) {
    for (int k = 0; k < s.num_top_logprobs && k < n; ++k) {
      float v;
      int32_t id;
      BlockArgmax(logits, n, sh.top_ids, k, sh, &v, &id);
      if (threadIdx.x == 0) sh.top_ids[k] = id;
      __syncthreads();
      ++num_top;
    }
  }

  // 7. Append and stop detection.
  if (threadIdx.x == 0) {
    const int32_t generated = p.slots.generated[slot] + 1;
    p.slots.generated[slot] = generated;
    p.slots.last_token[slot] = token;
    p.slots.pos[slot] = p.row_pos[row] + 1;
    sampling::FinishReason finish = sampling::FinishReason::kNone;
    for (int k = 0; k < s.num_stop_ids; ++k) {
      if (s.stop_ids[k] == token) finish = sampling::FinishReason::kStopToken;
    }
    if (finish == sampling::FinishReason::kNone && generated >= s.max_tokens) {
      finish = sampling::FinishReason::kLength;
    }
    if (finish != sampling::FinishReason::kNone) p.slots.done[slot] = 1;
    if (s.has_penalties) {
      uint16_t& c = p.slots.out_counts[static_cast<int64_t>(slot) * p.vocab + token];
      if (c < 0xFFFF) ++c;
    }
    out.key = s.key;
    out.slot = slot;
    out.token = token;
    out.finish = finish;
    out.logprob =
        need_probs ? static_cast<float>((logits[token] - max_logit) * inv_t - log_total) : 0.0f;
    out.num_top = num_top;
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
  if (p.chunk_max == nullptr || p.chunk_arg == nullptr) return cudaErrorInvalidValue;
  PenaltiesArgmaxKernel<<<dim3(p.rows, SampleChunks(p.valid_vocab)), kChunkThreads, 0, stream>>>(p);
  SampleKernel<<<p.rows, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace llm::kernels
