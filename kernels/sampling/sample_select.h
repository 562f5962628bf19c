// The split sampler's selection logic, shared by the device kernels (kernels/sampling/sampling.cu)
// and the host test that emulates them: which tokens top-k, top-p and min-p keep, found without a
// sort by a radix select over the probabilities' bit patterns, and the inverse-CDF draw over
// vocabulary chunks. Everything here is pure arithmetic on one row's state.
//
// A probability p in [0, 2) has a key (its float bits) below 2^30, and a larger key is a larger
// p. A select finds the largest key t whose weight at or above t (count for top-k, mass for
// top-p) reaches a target, one 10-bit digit of the key per pass: a pass histograms the digit of
// the keys that share the digits decided so far (the prefix), and the bucket where the running
// weight from the top crosses what is still needed gives the next digit. Three passes give the
// key exactly. Counts and masses are integers (mass in units of 2^-40, FixedMass), so a row's
// histogram summed by any number of blocks in any order is the same number.
//
// The kept set is then: p > 0, p >= min_p, and key > eq_key, or key == eq_key among the first
// eq_need such tokens in id order (equal keys are equal probabilities, so ties go by id, as the
// CPU sampler's sorts do). Top-p runs on what top-k kept: its select only sees keys above the
// top-k key (`floor`), and falls back to that key when they do not reach its target.
#ifndef LLM_KERNELS_SAMPLING_SAMPLE_SELECT_H_
#define LLM_KERNELS_SAMPLING_SAMPLE_SELECT_H_

#include <cstdint>
#include <cstring>

#include "common/fast_exp.h"

#if defined(__CUDACC__)
#define LLM_SELECT_HD __host__ __device__ __forceinline__
#else
#define LLM_SELECT_HD inline
#endif

namespace llm::kernels {

inline constexpr int kKeyBits = 30;
inline constexpr int kDigitBits = 10;
inline constexpr int kDigitLevels = kKeyBits / kDigitBits;  // passes per select
inline constexpr int kDigitBuckets = 1 << kDigitBits;
inline constexpr uint64_t kNoLimit = ~uint64_t{0};

enum SelectStage : int32_t { kStageTopK = 0, kStageTopP = 1, kStageDone = 2 };

// One sampling row's progress through the selects, and what the draw needs.
struct SampleRowState {
  int32_t stage;         // SelectStage
  int32_t level;         // digits of the current select decided so far
  uint32_t prefix;       // those digits
  uint32_t floor;        // keys <= floor take no part in the select (top-p after top-k)
  uint64_t remaining;    // weight still needed inside the prefix group
  uint64_t target;       // the top-p target mass (0: not set yet)
  uint64_t above_count;  // tokens with keys above the prefix group
  uint64_t above_mass;   // their mass
  uint32_t top_k_key;    // top-k's result: keys above it kept, and the first top_k_need equal
  uint32_t eq_key;       // the final kept set's threshold key
  uint64_t top_k_need;   // kNoLimit without top-k
  uint64_t eq_need;
  double total;          // sum of all probabilities (the logprob normaliser)
  double u;              // the draw, scaled by the kept mass
  double cum_before;     // kept mass of the chunks before the chosen one
  int32_t chosen_chunk;  // -1: nothing kept (the argmax is taken)
  int32_t eq_before;     // tokens at eq_key in the chunks before the chosen one
};

LLM_SELECT_HD uint32_t ProbKey(float p) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(p);
#else
  uint32_t k;
  std::memcpy(&k, &p, sizeof(k));
  return k;
#endif
}

LLM_SELECT_HD float KeyProb(uint32_t key) { return BitsToFloat(static_cast<int32_t>(key)); }

// p in units of 2^-40, rounded (exact in double: a float times a power of two).
LLM_SELECT_HD uint64_t FixedMass(float p) {
  return static_cast<uint64_t>(static_cast<double>(p) * 1099511627776.0 + 0.5);
}

// Whether a token takes part in the select at `level`: positive, above the floor, and sharing
// the prefix's digits. (The floor narrows top-p's histogram to what top-k kept; the threshold
// would come out the same without it, since top-k's key always holds enough mass.)
LLM_SELECT_HD bool InSelect(float p, uint32_t key, const SampleRowState& st) {
  return p > 0.0f && key < (1u << kKeyBits) && key > st.floor &&
         (key >> (kKeyBits - kDigitBits * st.level)) == st.prefix;
}

LLM_SELECT_HD int DigitOf(uint32_t key, int level) {
  return static_cast<int>((key >> (kKeyBits - kDigitBits * (level + 1))) & (kDigitBuckets - 1));
}

// The state before the first pass: which selects a row's settings ask for.
LLM_SELECT_HD SampleRowState StartRow(float temperature, int32_t top_k, float top_p, int32_t n) {
  SampleRowState st{};
  st.stage = kStageDone;
  st.top_k_need = kNoLimit;
  st.chosen_chunk = -1;
  if (temperature == 0.0f) return st;
  if (top_k > 0 && top_k < n) {
    st.stage = kStageTopK;
    st.remaining = static_cast<uint64_t>(top_k);
  } else if (top_p < 1.0f) {
    st.stage = kStageTopP;
  }
  return st;
}

// top_p of the kept mass, rounded up, at least one unit (so the top token always qualifies).
LLM_SELECT_HD uint64_t TopPTarget(float top_p, uint64_t kept_mass) {
  const double t = static_cast<double>(top_p) * static_cast<double>(kept_mass);
  uint64_t r = static_cast<uint64_t>(t);
  if (static_cast<double>(r) < t) ++r;
  return r < 1 ? 1 : r;
}

// What the select needs at this level: sets the top-p target from the level's whole mass (the
// mass of everything above the floor) when top-p is the first select.
LLM_SELECT_HD uint64_t SelectNeed(SampleRowState& st, float top_p, uint64_t level_mass) {
  if (st.stage == kStageTopP && st.target == 0)
    st.target = st.remaining = TopPTarget(top_p, level_mass);
  return st.remaining;
}

// The crossing inside buckets [lo, hi] walked from hi down: the first bucket where the weight
// above the range (`above`, plus the buckets walked) reaches `need`. Found only by the range
// that holds it when above < need; `c` then also gets the count and mass above that bucket
// within the range.
struct Crossing {
  int32_t bucket;
  uint64_t weight_above;  // in the level, above the bucket
  uint64_t count_above;
  uint64_t mass_above;
};

LLM_SELECT_HD bool FindCrossing(const uint64_t* count, const uint64_t* mass, bool by_mass, int hi,
                                int lo, uint64_t above_w, uint64_t above_c, uint64_t above_m,
                                uint64_t need, Crossing* c) {
  if (above_w >= need) return false;
  for (int b = hi; b >= lo; --b) {
    const uint64_t w = by_mass ? mass[b] : count[b];
    if (above_w + w >= need) {
      *c = {b, above_w, above_c, above_m};
      return true;
    }
    above_w += w;
    above_c += count[b];
    above_m += mass[b];
  }
  return false;
}

LLM_SELECT_HD uint64_t CeilDivU64(uint64_t a, uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// Top-p's result: key t with `above` mass above it; equal tokens join in id order until the
// target is reached (at least one); at top-k's key only the ones top-k kept can.
LLM_SELECT_HD void EndTopP(SampleRowState& st, uint32_t key, uint64_t above) {
  const uint64_t unit = FixedMass(KeyProb(key));
  uint64_t need = 1;
  if (unit == 0) {
    need = kNoLimit;
  } else if (st.target > above) {
    need = CeilDivU64(st.target - above, unit);
  }
  // (Cannot bind while the target is at most the kept mass; kept as a guard.)
  if (key == st.top_k_key && st.top_k_need < need) need = st.top_k_need;
  st.eq_key = key;
  st.eq_need = need;
  st.stage = kStageDone;
}

// Top-k's result: keys above `key` and the first `need` equal ones, of mass `kept`.
LLM_SELECT_HD void EndTopK(SampleRowState& st, float top_p, uint32_t key, uint64_t need,
                           uint64_t kept) {
  st.top_k_key = key;
  st.top_k_need = need;
  if (top_p < 1.0f) {
    st.stage = kStageTopP;
    st.level = 0;
    st.prefix = 0;
    st.floor = key;
    st.target = st.remaining = TopPTarget(top_p, kept);
    st.above_count = st.above_mass = 0;
  } else {
    st.eq_key = key;
    st.eq_need = need;
    st.stage = kStageDone;
  }
}

// After a level's histogram was scanned: `found` with crossing `c`, or not (then the level's
// whole weight fell short; this happens only at level 0). `level_mass` is the level's total.
LLM_SELECT_HD void FinishLevel(SampleRowState& st, float top_p, bool found, const Crossing& c,
                               uint64_t level_mass) {
  if (!found) {
    if (st.stage == kStageTopK) {
      EndTopK(st, top_p, 0, kNoLimit, level_mass);  // no more than k positive: all kept
    } else {
      EndTopP(st, st.floor, level_mass);  // nothing above top-k's key reaches the target
    }
    return;
  }
  st.above_count += c.count_above;
  st.above_mass += c.mass_above;
  st.remaining -= c.weight_above;
  st.prefix = (st.prefix << kDigitBits) | static_cast<uint32_t>(c.bucket);
  ++st.level;
  if (st.level < kDigitLevels) return;
  const uint32_t key = st.prefix;
  if (st.stage == kStageTopK) {
    EndTopK(st, top_p, key, st.remaining, st.above_mass + st.remaining * FixedMass(KeyProb(key)));
  } else {
    EndTopP(st, key, st.above_mass);
  }
}

// Whether a token is at eq_key (its rank among those, in id order, decides whether it is kept).
LLM_SELECT_HD bool AtEqKey(float p, uint32_t key, const SampleRowState& st) {
  return p > 0.0f && key == st.eq_key;
}

// Whether a token at `eq_rank` among the tokens at eq_key is kept (any rank above eq_key).
LLM_SELECT_HD bool Kept(float p, uint32_t key, uint64_t eq_rank, const SampleRowState& st,
                        float min_p) {
  if (!(p > 0.0f) || (min_p > 0.0f && p < min_p)) return false;
  return key > st.eq_key || (key == st.eq_key && eq_rank < st.eq_need);
}

// Kept, and strictly above eq_key (the part of a chunk's kept mass that needs no rank).
LLM_SELECT_HD bool KeptAbove(float p, uint32_t key, const SampleRowState& st, float min_p) {
  return p > 0.0f && !(min_p > 0.0f && p < min_p) && key > st.eq_key;
}

// Chunk c's kept mass: its mass above eq_key and its share of the first eq_need tokens at eq_key
// (eq_seen of them are in earlier chunks), when those pass min-p.
LLM_SELECT_HD double ChunkKept(const SampleRowState& st, double mass_above, uint64_t eq_seen,
                               int32_t eq_count, float min_p) {
  const float p_eq = KeyProb(st.eq_key);
  if (!(p_eq > 0.0f) || (min_p > 0.0f && p_eq < min_p)) return mass_above;
  const uint64_t left = st.eq_need > eq_seen ? st.eq_need - eq_seen : 0;
  const uint64_t here = static_cast<uint64_t>(eq_count);
  return mass_above + static_cast<double>(left < here ? left : here) * static_cast<double>(p_eq);
}

// The draw's chunk. As the CPU sampler: the first chunk whose running kept mass passes
// u = u01 * kept mass, or, when rounding leaves u at the very top, the last chunk that keeps
// anything (its last kept token is then taken).
LLM_SELECT_HD void ChooseChunk(SampleRowState& st, const double* mass_above,
                               const int32_t* eq_count, int32_t chunks, double u01, float min_p) {
  double total = 0.0;
  uint64_t eq_seen = 0;
  for (int32_t c = 0; c < chunks; ++c) {
    total += ChunkKept(st, mass_above[c], eq_seen, eq_count[c], min_p);
    eq_seen += static_cast<uint64_t>(eq_count[c]);
  }
  st.u = u01 * total;
  st.chosen_chunk = -1;
  double cum = 0.0;
  eq_seen = 0;
  for (int32_t c = 0; c < chunks; ++c) {
    const double kept = ChunkKept(st, mass_above[c], eq_seen, eq_count[c], min_p);
    if (kept > 0.0) {
      // The last chunk that keeps anything, unless an earlier one holds u.
      st.chosen_chunk = c;
      st.cum_before = cum;
      st.eq_before = static_cast<int32_t>(eq_seen);
      if (cum + kept > st.u) return;
    }
    cum += kept;
    eq_seen += static_cast<uint64_t>(eq_count[c]);
  }
}

// The draw inside ids [begin, end) of the chosen chunk: `rank` tokens at eq_key and `cum` kept
// mass come before `begin`. Returns the first kept id where the running mass passes u, or -1;
// `last_kept` gets the range's last kept id (or stays as it was).
LLM_SELECT_HD int32_t DrawInRange(const float* probs, int32_t begin, int32_t end,
                                  const SampleRowState& st, float min_p, uint64_t rank, double cum,
                                  int32_t* last_kept) {
  for (int32_t i = begin; i < end; ++i) {
    const float p = probs[i];
    const uint32_t key = ProbKey(p);
    const bool kept = Kept(p, key, rank, st, min_p);
    if (AtEqKey(p, key, st)) ++rank;
    if (!kept) continue;
    *last_kept = i;
    cum += p;
    if (cum > st.u) return i;
  }
  return -1;
}

}  // namespace llm::kernels

#undef LLM_SELECT_HD

#endif  // LLM_KERNELS_SAMPLING_SAMPLE_SELECT_H_
