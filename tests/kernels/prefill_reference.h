// Inputs and the reference for the prefill attention tests (the host emulation in
// prefill_tiles_test.cc, the kernel in rope_attention_test.cc): prompt chunks of several
// sequences over a paged cache whose blocks are scattered, and the causal (windowed) softmax
// attention of every chunk row in double.
#ifndef LLM_TESTS_KERNELS_PREFILL_REFERENCE_H_
#define LLM_TESTS_KERNELS_PREFILL_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention/prefill_attention.h"
#include "worker/model/dtype.h"

namespace llm::kernels::testing {

// One launch's inputs: the chunks of several sequences, a paged cache whose blocks are handed
// out in shuffled order, and the step's rows (q only is read).
struct Launch {
  int32_t D, G, KV, window;
  int32_t bt = 16;
  std::vector<PrefillChunk> chunks;
  std::vector<int32_t> tables;
  int32_t max_blocks = 0;
  std::vector<uint16_t> k, v, qkv;  // bf16 bits
  int32_t rows = 0;
  int32_t H() const { return G * KV; }
  int64_t qkv_stride() const { return int64_t{H() + 2 * KV} * D; }

  PrefillAttentionParams Params() const {
    PrefillAttentionParams p{};
    p.block_tables = tables.data();
    p.max_blocks_per_seq = max_blocks;
    p.num_heads = H();
    p.num_kv_heads = KV;
    p.head_dim = D;
    p.block_tokens = bt;
    p.sliding_window = window;
    p.scale = 1.0f / std::sqrt(static_cast<float>(D));
    return p;
  }
};

struct Seq {
  int32_t pos_begin;  // positions already in the cache before this chunk
  int32_t tokens;
};

inline Launch MakeLaunch(int32_t D, int32_t G, int32_t KV, int32_t window,
                         const std::vector<Seq>& seqs, uint32_t seed, int32_t block_tokens = 16) {
  Launch l{D, G, KV, window, block_tokens};
  std::mt19937 rng(seed);
  int32_t longest = 0, row = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    l.chunks.push_back({row, seqs[i].tokens, static_cast<int32_t>(i), seqs[i].pos_begin});
    row += seqs[i].tokens;
    longest = std::max(longest, seqs[i].pos_begin + seqs[i].tokens);
  }
  l.rows = row + 5;  // padding rows after the chunks, as the runner lays them out
  l.max_blocks = (longest + l.bt - 1) / l.bt;
  const int32_t blocks = l.max_blocks * static_cast<int32_t>(seqs.size());
  std::vector<int32_t> order(static_cast<size_t>(blocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  l.tables = order;  // slot s owns blocks order[s * max_blocks ...]: scattered
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto bf16 = [&](float scale) { return model::F32ToBf16(normal(rng) * scale); };
  l.k.resize(static_cast<size_t>(blocks) * KV * l.bt * D);
  l.v.resize(l.k.size());
  for (auto& x : l.k) x = bf16(1.0f);
  for (auto& x : l.v) x = bf16(1.0f);
  l.qkv.resize(static_cast<size_t>(l.rows) * l.qkv_stride());
  for (auto& x : l.qkv) x = bf16(2.0f);  // sharper softmax than unit scale
  return l;
}

// Causal (and windowed) softmax attention of every chunk row, in double, on the same bf16
// values; compared per (row, head) by relative L2 error. Tolerance 1e-2: P is rounded to bf16
// before P V, and the output to bf16, as on the device. `token_stride` > 1 checks every
// token_stride-th token of each chunk and its last (for prompts too long to check whole).
inline void ExpectMatchesReference(const Launch& l, const std::vector<float>& out, const char* what,
                                   int32_t token_stride = 1) {
  const PrefillAttentionParams p = l.Params();
  const int32_t D = l.D, H = l.H();
  double worst = 0;
  for (const PrefillChunk& c : l.chunks) {
    // The sequence's keys and values, gathered from its blocks.
    const int32_t len = c.pos_begin + c.tokens;
    std::vector<double> k(static_cast<size_t>(len) * l.KV * D), v(k.size());
    for (int32_t t = 0; t < len; ++t) {
      for (int32_t kv = 0; kv < l.KV; ++kv) {
        const size_t at = static_cast<size_t>(PagedCacheOffset(p, c.slot, t, kv));
        for (int32_t d = 0; d < D; ++d) {
          k[(static_cast<size_t>(t) * l.KV + kv) * D + d] = model::Bf16ToF32(l.k[at + d]);
          v[(static_cast<size_t>(t) * l.KV + kv) * D + d] = model::Bf16ToF32(l.v[at + d]);
        }
      }
    }
    for (int32_t j = 0; j < c.tokens; ++j) {
      if (j % token_stride != 0 && j + 1 != c.tokens) continue;
      const int32_t pos = c.pos_begin + j, row = c.row_begin + j;
      const int32_t first = PrefillFirstKey(pos, l.window);
      for (int32_t h = 0; h < H; ++h) {
        const int32_t kv = h / l.G;
        std::vector<double> q(static_cast<size_t>(D)), want(static_cast<size_t>(D), 0.0);
        for (int32_t d = 0; d < D; ++d) {
          q[d] = model::Bf16ToF32(l.qkv[static_cast<size_t>(row * l.qkv_stride() + h * D + d)]);
        }
        std::vector<double> score;
        double mx = -1e300;
        for (int32_t t = first; t <= pos; ++t) {
          const double* kt = &k[(static_cast<size_t>(t) * l.KV + kv) * D];
          double dot = 0;
          for (int32_t d = 0; d < D; ++d) dot += q[d] * kt[d];
          score.push_back(dot * p.scale);
          mx = std::max(mx, score.back());
        }
        double total = 0;
        for (double& s : score) total += (s = std::exp(s - mx));
        for (int32_t t = first; t <= pos; ++t) {
          const double* vt = &v[(static_cast<size_t>(t) * l.KV + kv) * D];
          const double w = score[t - first] / total;
          for (int32_t d = 0; d < D; ++d) want[d] += w * vt[d];
        }
        double err = 0, norm = 0;
        for (int32_t d = 0; d < D; ++d) {
          const double got = out[static_cast<size_t>(row) * H * D + h * D + d];
          err += (got - want[d]) * (got - want[d]);
          norm += want[d] * want[d];
        }
        const double rel = std::isnan(err) ? 1e9 : std::sqrt(err / std::max(norm, 1e-12));
        worst = std::max(worst, rel);
        ASSERT_LT(rel, 1e-2) << what << ": chunk of slot " << c.slot << " (positions "
                             << c.pos_begin << "+" << c.tokens << "), token " << j << ", head " << h
                             << ", D " << D << ", G " << l.G << ", window " << l.window;
      }
    }
  }
  // A window of 1 is each row's own value, exactly; anything else exact would mean the
  // emulation and the reference share a mistake.
  if (l.window != 1) {
    EXPECT_GT(worst, 0.0) << what << ": every output exact is suspicious";
  }
}

}  // namespace llm::kernels::testing

#endif  // LLM_TESTS_KERNELS_PREFILL_REFERENCE_H_
