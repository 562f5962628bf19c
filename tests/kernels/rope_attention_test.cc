// RoPE + KV write and paged attention against the CPU reference math, over odd shapes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "common/fp8.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/prefill_attention.h"
#include "kernels/elementwise/rmsnorm.h"
#include "kernels/elementwise/rope_kv.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemv.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/prefill_reference.h"
#include "worker/runner/cpu_ops.h"

namespace llm::kernels {
namespace {

using namespace llm::kernels::testing;

struct Case {
  int rows;
  int head_dim;
  int heads;
  int kv_heads;
  int window;
};

// A paged cache for `slots` sequences of up to `max_len` tokens, blocks handed out in a
// scrambled order so block-table indirection is exercised.
struct PagedSetup {
  int block_tokens = 16;
  int max_blocks;
  std::vector<int32_t> tables;
  int num_blocks;
  PagedSetup(int slots, int max_len) {
    max_blocks = (max_len + block_tokens - 1) / block_tokens;
    num_blocks = slots * max_blocks;
    std::vector<int32_t> order(num_blocks);
    std::iota(order.begin(), order.end(), 0);
    for (size_t i = 0; i < order.size(); ++i) std::swap(order[i], order[(i * 7919) % order.size()]);
    tables = order;
  }
};

// cos/sin tables [max_pos, D / 2] for theta 10000, as the runner computes them.
void RopeTables(int D, int max_pos, std::vector<float>* cos_t, std::vector<float>* sin_t) {
  std::vector<double> inv_freq(D / 2);
  for (int i = 0; i < D / 2; ++i) inv_freq[i] = 1.0 / std::pow(10000.0, 2.0 * i / D);
  cos_t->assign(size_t(max_pos) * D / 2, 0.0f);
  sin_t->assign(cos_t->size(), 0.0f);
  for (int p = 0; p < max_pos; ++p) {
    runner::RopeCosSin(inv_freq.data(), D / 2, p, &(*cos_t)[size_t(p) * D / 2],
                       &(*sin_t)[size_t(p) * D / 2]);
  }
}

TEST(RopeKvKernelTest, RotatesAndWritesThePagedCache) {
  LLM_REQUIRE_GPU();
  // Head sizes of eights take the vector items (RopeKvVectorsFit); 12 the one-element ones.
  for (Case c : {Case{1, 64, 8, 8, 0}, Case{7, 128, 32, 8, 0}, Case{33, 16, 8, 1, 0},
                 Case{5, 12, 4, 2, 0}}) {
    const int D = c.head_dim, H = c.heads, KV = c.kv_heads, width = (H + 2 * KV) * D;
    PagedSetup pg(c.rows, 300);
    std::vector<int32_t> pos(c.rows), slot(c.rows);
    for (int r = 0; r < c.rows; ++r) {
      pos[r] = (r * 37 + 5) % 290;  // not block aligned
      slot[r] = r;
    }
    const int max_pos = 300;
    std::vector<float> cos_t, sin_t;
    RopeTables(D, max_pos, &cos_t, &sin_t);
    const auto qkv = RandomFloats(size_t(c.rows) * width, 7);
    DeviceBuffer<__nv_bfloat16> d_qkv(ToBf16Vector(qkv));
    DeviceBuffer<int32_t> d_pos(pos), d_slot(slot), d_tables(pg.tables);
    DeviceBuffer<float> d_cos(cos_t), d_sin(sin_t);
    const size_t cache_elems = size_t(pg.num_blocks) * KV * pg.block_tokens * D;
    DeviceBuffer<__nv_bfloat16> d_k(cache_elems), d_v(cache_elems);
    LLM_CUDA_OK(LaunchRopeKv(
        {d_qkv.get(), d_pos.get(), d_slot.get(), d_tables.get(), pg.max_blocks, d_cos.get(),
         d_sin.get(), d_k.get(), d_v.get(), c.rows, H, KV, D, pg.block_tokens},
        0));
    const auto q_out = FromBf16Vector(d_qkv.Download());
    const auto k_cache = FromBf16Vector(d_k.Download());
    const auto v_cache = FromBf16Vector(d_v.Download());
    for (int r = 0; r < c.rows; ++r) {
      std::vector<float> row(qkv.begin() + size_t(r) * width, qkv.begin() + size_t(r + 1) * width);
      for (int h = 0; h < H + KV; ++h) {
        runner::ApplyRope(&row[size_t(h) * D], &cos_t[size_t(pos[r]) * D / 2],
                          &sin_t[size_t(pos[r]) * D / 2], D);
      }
      const int block = pg.tables[size_t(r) * pg.max_blocks + pos[r] / pg.block_tokens];
      for (int h = 0; h < H; ++h) {
        for (int d = 0; d < D; ++d) {
          const float want = row[size_t(h) * D + d];
          ASSERT_NEAR(q_out[size_t(r) * width + h * D + d], want, std::fabs(want) / 128 + 1e-3);
        }
      }
      for (int kh = 0; kh < KV; ++kh) {
        const size_t at =
            ((size_t(block) * KV + kh) * pg.block_tokens + pos[r] % pg.block_tokens) * D;
        for (int d = 0; d < D; ++d) {
          const float k_want = row[size_t(H + kh) * D + d];
          ASSERT_NEAR(k_cache[at + d], k_want, std::fabs(k_want) / 128 + 1e-3);
          ASSERT_EQ(v_cache[at + d], row[size_t(H + KV + kh) * D + d]);  // copied as is
        }
      }
    }
  }
}

// Attention of one query per row against its paged context, computed in double on the same
// bf16 inputs. Tolerance: relative error 1e-2 (bf16 output, bf16 inputs are exact).
void CheckAttention(const Case& c, int splits, bool tensor_cores, uint32_t seed) {
  const int D = c.head_dim, H = c.heads, KV = c.kv_heads, width = (H + 2 * KV) * D;
  const int max_len = 700;
  PagedSetup pg(c.rows, max_len);
  const size_t cache_elems = size_t(pg.num_blocks) * KV * pg.block_tokens * D;
  const auto k_cache = RandomFloats(cache_elems, seed);
  const auto v_cache = RandomFloats(cache_elems, seed + 1);
  const auto qkv = RandomFloats(size_t(c.rows) * width, seed + 2);
  std::vector<int32_t> pos(c.rows), slot(c.rows);
  const int lengths[] = {1, 17, 100, 513, 16, 650, 33};
  for (int r = 0; r < c.rows; ++r) {
    pos[r] = lengths[r % 7] - 1;
    slot[r] = r;
  }
  if (c.rows > 2) slot[1] = -1;  // a padding row
  DeviceBuffer<__nv_bfloat16> d_k(ToBf16Vector(k_cache)), d_v(ToBf16Vector(v_cache));
  DeviceBuffer<__nv_bfloat16> d_qkv(ToBf16Vector(qkv)), d_out(size_t(c.rows) * H * D);
  DeviceBuffer<int32_t> d_pos(pos), d_slot(slot), d_tables(pg.tables);
  DeviceBuffer<float> p_out(size_t(c.rows) * H * splits * D), p_max(size_t(c.rows) * H * splits),
      p_sum(size_t(c.rows) * H * splits);
  // Zero before the first launch (DeviceBuffer poisons); each launch leaves them zero.
  DeviceBuffer<int32_t> arrivals(std::vector<int32_t>(size_t(c.rows) * KV, 0));
  AttentionParams p{d_qkv.get(),
                    d_k.get(),
                    d_v.get(),
                    d_pos.get(),
                    d_slot.get(),
                    d_tables.get(),
                    pg.max_blocks,
                    d_out.get(),
                    p_out.get(),
                    p_max.get(),
                    p_sum.get(),
                    arrivals.get(),
                    0,
                    c.rows,
                    H,
                    KV,
                    D,
                    pg.block_tokens,
                    c.window,
                    splits,
                    1.0f / std::sqrt(static_cast<float>(D)),
                    tensor_cores};
  LLM_CUDA_OK(LaunchAttention(p, 0));
  LLM_CUDA_OK(cudaDeviceSynchronize());
  const auto out = FromBf16Vector(d_out.Download());
  // The last chunk of each (row, KV head) combined and reset its counter: a second launch finds
  // them at zero and gives the same bits.
  EXPECT_EQ(arrivals.Download(), std::vector<int32_t>(size_t(c.rows) * KV, 0));
  LLM_CUDA_OK(LaunchAttention(p, 0));
  LLM_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(FromBf16Vector(d_out.Download()), out)
      << "second launch, splits " << splits << ", tensor cores " << AttentionUsesTensorCores(p);
  for (int r = 0; r < c.rows; ++r) {
    if (slot[r] < 0) continue;
    std::vector<float> got;
    std::vector<double> want;
    const int first = c.window > 0 ? std::max(0, pos[r] - c.window + 1) : 0;
    for (int h = 0; h < H; ++h) {
      const int kh = h / (H / KV);
      std::vector<double> scores;
      double mx = -1e300;
      for (int t = first; t <= pos[r]; ++t) {
        const int block = pg.tables[size_t(r) * pg.max_blocks + t / pg.block_tokens];
        const size_t at = ((size_t(block) * KV + kh) * pg.block_tokens + t % pg.block_tokens) * D;
        double s = 0;
        for (int d = 0; d < D; ++d)
          s += double(qkv[size_t(r) * width + h * D + d]) * k_cache[at + d];
        scores.push_back(s / std::sqrt(double(D)));
        mx = std::max(mx, scores.back());
      }
      double sum = 0;
      for (double& s : scores) sum += (s = std::exp(s - mx));
      for (int d = 0; d < D; ++d) {
        double o = 0;
        for (int t = first; t <= pos[r]; ++t) {
          const int block = pg.tables[size_t(r) * pg.max_blocks + t / pg.block_tokens];
          const size_t at = ((size_t(block) * KV + kh) * pg.block_tokens + t % pg.block_tokens) * D;
          o += scores[t - first] / sum * v_cache[at + d];
        }
        want.push_back(o);
        got.push_back(out[(size_t(r) * H + h) * D + d]);
      }
    }
    EXPECT_LT(RelativeError(got, want), 1e-2)
        << "rows " << c.rows << " D " << D << " H " << H << " KV " << KV << " window " << c.window
        << " splits " << splits << " row " << r << " len " << pos[r] + 1 << " tensor cores "
        << AttentionUsesTensorCores(p);
  }
}

// A q/k/v GEMV case with RoPE/KV on the device: rows at scattered positions in a scrambled paged
// cache (row 1 a padding row when asked), the RoPE tables, and two copies of the outputs (a: the
// reference path, b: the fused one), poisoned alike so untouched entries compare equal too.
struct QkvRopeOutputs {
  QkvRopeOutputs(int rows, int D, int H, int KV, bool padding)
      : pg(rows, 300),
        width((H + 2 * KV) * D),
        pos(Positions(rows)),
        slot(Slots(rows, padding)),
        tables(pg.tables),
        cos_t(Table(D, true)),
        sin_t(Table(D, false)),
        qkv_a(size_t(rows) * width),
        k_a(CacheElems(D, KV)),
        v_a(CacheElems(D, KV)),
        qkv_b(size_t(rows) * width),
        k_b(CacheElems(D, KV)),
        v_b(CacheElems(D, KV)) {
    a = {qkv_a.get(), pos.get(),   slot.get(), tables.get(),   pg.max_blocks,
         cos_t.get(), sin_t.get(), k_a.get(),  v_a.get(),      rows,
         H,           KV,          D,          pg.block_tokens};
    b = a;
    b.qkv = qkv_b.get();
    b.k_cache = k_b.get();
    b.v_cache = v_b.get();
  }
  static std::vector<int32_t> Positions(int rows) {
    std::vector<int32_t> v(rows);
    for (int r = 0; r < rows; ++r) v[r] = (r * 37 + 5) % 290;
    return v;
  }
  static std::vector<int32_t> Slots(int rows, bool padding) {
    std::vector<int32_t> v(rows);
    for (int r = 0; r < rows; ++r) v[r] = r;
    if (padding && rows > 1) v[1] = -1;
    return v;
  }
  static std::vector<float> Table(int D, bool cos) {
    std::vector<float> c, s;
    RopeTables(D, 300, &c, &s);
    return cos ? c : s;
  }
  size_t CacheElems(int D, int KV) const {
    return size_t(pg.num_blocks) * KV * pg.block_tokens * D;
  }
  // Elements of qkv, K and V (in that order) whose bits differ between a and b.
  std::vector<int> Differing() const {
    auto differ = [](const DeviceBuffer<__nv_bfloat16>& p, const DeviceBuffer<__nv_bfloat16>& q) {
      const auto u = p.Download(), v = q.Download();
      int n = 0;
      for (size_t k = 0; k < u.size(); ++k) n += std::memcmp(&u[k], &v[k], sizeof(u[k])) != 0;
      return n;
    };
    return {differ(qkv_a, qkv_b), differ(k_a, k_b), differ(v_a, v_b)};
  }

  PagedSetup pg;
  int width;
  DeviceBuffer<int32_t> pos, slot, tables;
  DeviceBuffer<float> cos_t, sin_t;
  DeviceBuffer<__nv_bfloat16> qkv_a, k_a, v_a, qkv_b, k_b, v_b;
  RopeKvParams a{}, b{};
};

// The q/k/v GEMV with RoPE and the K/V write as its epilogue (gemv.h, RoPE/KV) leaves the bits
// of the product followed by LaunchRopeKv: the same qkv buffer (q rotated, k and v as the
// product wrote them) and the same K and V caches, at 1, 2, 3 and 8 rows (the GEMV's most),
// with a padding row, head dims 64 and 128, groups 1, 4 and 7, with and without a bias; a Gemm
// without the GEMV path refuses it.
TEST(RopeKvKernelTest, QkvGemvEpilogueIsTheProductThenRopeKv) {
  LLM_REQUIRE_GPU();
  Gemm gemm, cublas_only;
  LLM_CUDA_OK(gemm.Init());
  LLM_CUDA_OK(cublas_only.Init({.use_gemv = false}));
  for (Case c : {Case{1, 64, 4, 4, 0}, Case{3, 128, 8, 2, 0}, Case{8, 64, 14, 2, 0}}) {
    for (const int rows : {c.rows, 2, kGemvMaxRows}) {
      for (const bool with_bias : {false, true}) {
        const int D = c.head_dim, H = c.heads, KV = c.kv_heads;
        const int in = 264;
        QkvRopeOutputs o(rows, D, H, KV, /*padding=*/rows > 2);
        const auto x = RandomFloats(size_t(rows) * in, 50 + rows, -2, 2);
        const auto w = RandomFloats(size_t(o.width) * in, 51, -0.2f, 0.2f);
        const auto bias = RandomFloats(o.width, 52);
        DeviceBuffer<__nv_bfloat16> d_x(ToBf16Vector(x)), d_w(ToBf16Vector(w)),
            d_bias(ToBf16Vector(bias));
        const void* b = with_bias ? static_cast<const void*>(d_bias.get()) : nullptr;
        EXPECT_EQ(
            gemm.Run({d_x.get(), d_w.get(), b, o.qkv_a.get(), rows, in, o.width, GemmOut::kBf16},
                     0),
            0);
        LLM_CUDA_OK(LaunchRopeKv(o.a, 0));
        GemmArgs fused{d_x.get(), d_w.get(), b, o.qkv_b.get(), rows, in, o.width, GemmOut::kBf16};
        fused.rope_kv = &o.b;
        ASSERT_TRUE(gemm.FusesEpilogue(fused));
        EXPECT_FALSE(cublas_only.FusesEpilogue(fused));
        EXPECT_NE(cublas_only.Run(fused, 0), 0);  // refused, not silently unfused
        EXPECT_EQ(gemm.Run(fused, 0), 0);
        LLM_CUDA_OK(cudaDeviceSynchronize());
        EXPECT_EQ(o.Differing(), std::vector<int>({0, 0, 0}))
            << "qkv, K, V: " << rows << " rows, D " << D << ", H " << H << ", KV " << KV
            << (with_bias ? ", bias" : "");
      }
    }
  }
}

// An FP8 cache (issue 30): the q/k/v GEMV's RoPE/KV epilogue and LaunchRopeKv write the same
// E4M3 bytes, and those are the bytes the host's RopeKvItem writes from the product's output
// (common/fp8.h's rounding), with scales that are not powers of two; q stays bf16 alike.
TEST(RopeKvKernelTest, Fp8CacheBytesOfTheEpilogueAndLaunchRopeKvAreTheHosts) {
  LLM_REQUIRE_GPU();
  Gemm gemm;
  LLM_CUDA_OK(gemm.Init());
  const KvCacheFormat format{true, 0.0173f, 0.0291f};
  for (Case c : {Case{1, 64, 4, 4, 0}, Case{3, 128, 8, 2, 0}, Case{8, 64, 14, 2, 0}}) {
    const int rows = c.rows, D = c.head_dim, H = c.heads, KV = c.kv_heads, in = 264;
    const bool padding = rows > 2;
    QkvRopeOutputs o(rows, D, H, KV, padding);
    const size_t elems = o.CacheElems(D, KV);
    DeviceBuffer<uint8_t> k_a(elems), v_a(elems), k_b(elems), v_b(elems);  // poisoned alike
    RopeKvParams a = o.a, b = o.b;
    a.k_cache = k_a.get();
    a.v_cache = v_a.get();
    b.k_cache = k_b.get();
    b.v_cache = v_b.get();
    a.kv = b.kv = format;
    const auto x = RandomFloats(size_t(rows) * in, 60 + rows, -2, 2);
    const auto w = RandomFloats(size_t(o.width) * in, 61, -0.2f, 0.2f);
    DeviceBuffer<__nv_bfloat16> d_x(ToBf16Vector(x)), d_w(ToBf16Vector(w));
    ASSERT_EQ(
        gemm.Run({d_x.get(), d_w.get(), nullptr, o.qkv_a.get(), rows, in, o.width, GemmOut::kBf16},
                 0),
        0);
    LLM_CUDA_OK(cudaDeviceSynchronize());
    std::vector<__nv_bfloat16> host_qkv = o.qkv_a.Download();  // the product, before RoPE
    LLM_CUDA_OK(LaunchRopeKv(a, 0));
    GemmArgs fused{d_x.get(), d_w.get(), nullptr, o.qkv_b.get(), rows, in, o.width, GemmOut::kBf16};
    fused.rope_kv = &b;
    ASSERT_TRUE(gemm.FusesEpilogue(fused));
    ASSERT_EQ(gemm.Run(fused, 0), 0);
    LLM_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(o.Differing()[0], 0) << "qkv, " << rows << " rows";
    EXPECT_EQ(k_a.Download(), k_b.Download()) << "K bytes, " << rows << " rows, D " << D;
    EXPECT_EQ(v_a.Download(), v_b.Download()) << "V bytes, " << rows << " rows, D " << D;
    // The host's items on the same product.
    const std::vector<int32_t> pos = QkvRopeOutputs::Positions(rows);
    const std::vector<int32_t> slot = QkvRopeOutputs::Slots(rows, padding);
    const std::vector<float> cos_t = QkvRopeOutputs::Table(D, true);
    const std::vector<float> sin_t = QkvRopeOutputs::Table(D, false);
    std::vector<uint8_t> k_host = k_a.Download(), v_host = v_a.Download();
    std::fill(k_host.begin(), k_host.end(), uint8_t{0xCD});  // DeviceBuffer's poison
    std::fill(v_host.begin(), v_host.end(), uint8_t{0xCD});
    RopeKvParams h = a;
    h.qkv = host_qkv.data();
    h.row_pos = pos.data();
    h.row_slot = slot.data();
    h.block_tables = o.pg.tables.data();
    h.cos_table = cos_t.data();
    h.sin_table = sin_t.data();
    h.k_cache = k_host.data();
    h.v_cache = v_host.data();
    for (int r = 0; r < rows; ++r) {
      if (slot[r] < 0) continue;
      for (int32_t k = 0; k < RopeKvItems(h); ++k) RopeKvItem(h, r, k);
    }
    EXPECT_EQ(k_a.Download(), k_host) << "K bytes against the host, " << rows << " rows";
    EXPECT_EQ(v_a.Download(), v_host) << "V bytes against the host, " << rows << " rows";
  }
}

// The q/k/v GEMV with the norm prologue as well as the RoPE/KV epilogue (a batch-1 layer's
// first product, engine.cuda_fused_norm) leaves the bits of LaunchRmsNorm followed by the
// RoPE/KV GEMV (itself the product followed by LaunchRopeKv, above): the same qkv buffer and K
// and V caches, zero tolerance, at 1 and 2 rows (kGemvNormMaxRows; one case with a padding
// row), head dims 64 and 128, groups 1, 4 and 7, hidden sizes 896 and 4096, with and without a
// bias.
TEST(RopeKvKernelTest, QkvGemvWithNormPrologueIsRmsNormThenTheFusedProduct) {
  LLM_REQUIRE_GPU();
  Gemm gemm;
  LLM_CUDA_OK(gemm.Init());
  for (Case c : {Case{1, 64, 4, 4, 0}, Case{2, 128, 8, 2, 0}, Case{2, 64, 14, 2, 0}}) {
    for (const int in : {896, 4096}) {
      for (const bool with_bias : {false, true}) {
        const int rows = c.rows, D = c.head_dim, H = c.heads, KV = c.kv_heads;
        QkvRopeOutputs o(rows, D, H, KV, /*padding=*/H == 14);
        std::vector<float> x = RandomFloats(size_t(rows) * in, 80 + rows, -3, 3);
        for (float& v : x) v *= 1.0f + 1e-3f;  // not bf16-representable, as a residual stream
        const auto gamma = RandomFloats(in, 81, 0.5f, 1.5f);
        const auto w = RandomFloats(size_t(o.width) * in, 82, -0.2f, 0.2f);
        const auto bias = RandomFloats(o.width, 83);
        DeviceBuffer<float> d_x(x);
        DeviceBuffer<__nv_bfloat16> d_gamma(ToBf16Vector(gamma)), d_w(ToBf16Vector(w)),
            d_bias(ToBf16Vector(bias)), xn(size_t(rows) * in);
        const void* b = with_bias ? static_cast<const void*>(d_bias.get()) : nullptr;
        const float eps = 1e-6f;
        LLM_CUDA_OK(LaunchRmsNorm(
            {d_x.get(), nullptr, d_gamma.get(), xn.get(), nullptr, rows, in, eps}, 0));
        GemmArgs a{xn.get(), d_w.get(), b, o.qkv_a.get(), rows, in, o.width, GemmOut::kBf16};
        a.rope_kv = &o.a;
        const NormInput norm{d_x.get(), d_gamma.get(), eps};
        GemmArgs fused{nullptr, d_w.get(), b, o.qkv_b.get(), rows, in, o.width, GemmOut::kBf16};
        fused.rope_kv = &o.b;
        fused.norm = &norm;
        const std::string what = std::to_string(rows) + " rows, in " + std::to_string(in) + ", D " +
                                 std::to_string(D) + ", H " + std::to_string(H) + ", KV " +
                                 std::to_string(KV) + (with_bias ? ", bias" : "");
        ASSERT_TRUE(gemm.FusesEpilogue(a)) << what;
        ASSERT_TRUE(gemm.FusesEpilogue(fused)) << what;
        EXPECT_EQ(gemm.Run(a, 0), 0) << what;
        EXPECT_EQ(gemm.Run(fused, 0), 0) << what;
        LLM_CUDA_OK(cudaDeviceSynchronize());
        EXPECT_EQ(o.Differing(), std::vector<int>({0, 0, 0})) << "qkv, K, V: " << what;
      }
    }
  }
}

TEST(AttentionKernelTest, DecodeSplitAndPrefillSinglePartition) {
  LLM_REQUIRE_GPU();
  const Case cases[] = {{1, 64, 8, 8, 0},    {7, 128, 32, 8, 0}, {33, 128, 32, 4, 0},
                        {7, 16, 8, 4, 0},    {7, 64, 14, 2, 0},  {7, 32, 8, 1, 0},
                        {7, 128, 32, 8, 100}};
  uint32_t seed = 10;
  for (const Case& c : cases) {
    // One block per row; 2 and 7 chunks (some past short rows' context); 64, the most. Head
    // dims 64 and 128 on both kernels (16 and 32 have the CUDA-core one only).
    for (const int splits : {1, 2, 7, 64}) {
      for (const bool tensor_cores : {true, false}) {
        if (tensor_cores && c.head_dim < 64) continue;
        CheckAttention(c, splits, tensor_cores, seed++);
      }
    }
  }
}

// An FP8 cache for a launch: its K and V as E4M3 bytes with power-of-two scales, and the launch
// with its bf16 K and V replaced by what those bytes stand for (exact in bf16), so the double
// reference (prefill_reference.h) is the FP8 cache's.
struct Fp8Kv {
  std::vector<uint8_t> k, v;
  KvCacheFormat format{true, 1.0f / 64, 1.0f / 32};
};

Fp8Kv QuantiseCache(Launch& l) {
  Fp8Kv q;
  auto round = [](std::vector<uint16_t>& bits, float scale, std::vector<uint8_t>& bytes) {
    bytes.resize(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) {
      bytes[i] = Fp8E4M3FromFloat(Fp8BitsFloat(uint32_t{bits[i]} << 16) / scale);
      // Exact in bf16: a power-of-two scale.
      bits[i] = static_cast<uint16_t>(Fp8FloatBits(Fp8E4M3ToFloat(bytes[i]) * scale) >> 16);
    }
  };
  round(l.k, q.format.k_scale, q.k);
  round(l.v, q.format.v_scale, q.v);
  return q;
}

// Decode rows, one query token each, on both kernels at the shapes of issue 12: batches 1, 7 and
// 33; contexts 1, 15, 17, 1,000 and 4,095; head dims 64 and 128; groups 1, 4, 7 and 8; one
// block per row, 5 chunks and 64. A decode row is a one-token chunk of the prefill tests'
// launches, so the same double reference applies (prefill_reference.h): relative L2 error 1e-2
// per (row, head). A second launch gives the same bits (the split counters were left at zero).
// `fp8`: the cache is its bytes instead.
std::vector<float> RunDecode(const Launch& l, int32_t splits, bool tensor_cores,
                             const Fp8Kv* fp8 = nullptr) {
  std::vector<int32_t> pos(static_cast<size_t>(l.rows), 0), slot(static_cast<size_t>(l.rows), -1);
  for (const PrefillChunk& c : l.chunks) {
    pos[c.row_begin] = c.pos_begin;
    slot[c.row_begin] = c.slot;
  }
  DeviceBuffer<uint16_t> d_k(l.k), d_v(l.v), d_qkv(l.qkv);
  DeviceBuffer<uint8_t> d_k8(fp8 ? fp8->k : std::vector<uint8_t>{}),
      d_v8(fp8 ? fp8->v : std::vector<uint8_t>{});
  auto bf16 = [](const DeviceBuffer<uint16_t>& b) {
    return reinterpret_cast<const __nv_bfloat16*>(b.get());
  };
  const size_t parts = static_cast<size_t>(l.rows) * l.H() * splits;
  DeviceBuffer<__nv_bfloat16> d_out(static_cast<size_t>(l.rows) * l.H() * l.D);
  DeviceBuffer<int32_t> d_pos(pos), d_slot(slot), d_tables(l.tables);
  DeviceBuffer<float> p_out(parts * l.D), p_max(parts), p_sum(parts);
  DeviceBuffer<int32_t> arrivals(std::vector<int32_t>(static_cast<size_t>(l.rows) * l.KV, 0));
  const PrefillAttentionParams pp = l.Params();
  AttentionParams p{};
  p.qkv = bf16(d_qkv);
  p.k_cache = fp8 ? static_cast<const void*>(d_k8.get()) : bf16(d_k);
  p.v_cache = fp8 ? static_cast<const void*>(d_v8.get()) : bf16(d_v);
  if (fp8) p.kv = fp8->format;
  p.row_pos = d_pos.get();
  p.row_slot = d_slot.get();
  p.block_tables = d_tables.get();
  p.max_blocks_per_seq = pp.max_blocks_per_seq;
  p.out = d_out.get();
  p.partial_out = p_out.get();
  p.partial_max = p_max.get();
  p.partial_sum = p_sum.get();
  p.split_arrivals = arrivals.get();
  p.rows = l.rows;
  p.num_heads = pp.num_heads;
  p.num_kv_heads = pp.num_kv_heads;
  p.head_dim = pp.head_dim;
  p.block_tokens = pp.block_tokens;
  p.sliding_window = pp.sliding_window;
  p.splits = splits;
  p.scale = pp.scale;
  p.tensor_cores = tensor_cores;
  EXPECT_EQ(AttentionUsesTensorCores(p), tensor_cores);
  const std::vector<int32_t> zeros(static_cast<size_t>(l.rows) * l.KV, 0);
  EXPECT_EQ(LaunchAttention(p, 0), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(arrivals.Download(), zeros) << "the last chunks put their counters back";
  auto bits = [&] {
    const std::vector<__nv_bfloat16> v = d_out.Download();
    std::vector<uint16_t> b(v.size());
    std::memcpy(b.data(), v.data(), v.size() * sizeof(uint16_t));
    return b;
  };
  const std::vector<uint16_t> first = bits();
  // Padding rows keep DeviceBuffer's poison (0xCDCD).
  int64_t touched = 0;
  for (int32_t r = 0; r < l.rows; ++r) {
    if (slot[r] >= 0) continue;
    for (int32_t k = 0; k < l.H() * l.D; ++k) {
      touched += first[static_cast<size_t>(r) * l.H() * l.D + k] != 0xCDCDu ? 1 : 0;
    }
  }
  EXPECT_EQ(touched, 0) << "outputs written in padding rows";
  // Poison again: a second launch that combined nothing would leave the first one's output.
  EXPECT_EQ(cudaMemset(d_out.get(), 0xAB, first.size() * sizeof(uint16_t)), cudaSuccess);
  EXPECT_EQ(LaunchAttention(p, 0), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(arrivals.Download(), zeros);
  std::vector<uint16_t> second = bits();
  for (int32_t r = 0; r < l.rows; ++r) {
    if (slot[r] >= 0) continue;
    std::fill_n(second.begin() + static_cast<size_t>(r) * l.H() * l.D, l.H() * l.D,
                uint16_t{0xCDCD});
  }
  EXPECT_EQ(second, first) << "second launch, the same bits";
  return FromBf16Vector(d_out.Download());
}

TEST(AttentionKernelTest, DecodeRowsOnTensorCoresAndCudaCores) {
  LLM_REQUIRE_GPU();
  const int32_t contexts[] = {1, 15, 17, 1000, 4095};
  struct Shape {
    int32_t batch, D, G, KV;
    int32_t first_context;  // index into contexts of row 0's
  };
  uint32_t seed = 40;
  for (const Shape s : {Shape{1, 128, 4, 8, 4}, Shape{1, 128, 4, 8, 3}, Shape{7, 64, 7, 2, 0},
                        Shape{33, 128, 8, 1, 0}, Shape{7, 64, 1, 4, 2}, Shape{33, 64, 4, 2, 1},
                        Shape{1, 64, 8, 1, 1}}) {
    std::vector<Seq> seqs;
    for (int32_t r = 0; r < s.batch; ++r) {
      seqs.push_back({contexts[(r + s.first_context) % 5] - 1, 1});
    }
    const Launch l = MakeLaunch(s.D, s.G, s.KV, /*window=*/0, seqs, seed++);
    for (const bool tensor_cores : {true, false}) {
      for (const int32_t splits : {1, 5, 64}) {
        const std::string what = "batch " + std::to_string(s.batch) + ", D " + std::to_string(s.D) +
                                 ", G " + std::to_string(s.G) + ", splits " +
                                 std::to_string(splits) + (tensor_cores ? ", tensor cores" : "");
        ExpectMatchesReference(l, RunDecode(l, splits, tensor_cores), what.c_str());
      }
    }
  }
}

// The tiled prefill kernel on the device against the double reference (prefill_reference.h),
// the same cases as the host emulation (prefill_tiles_test.cc). Tolerance: relative L2 error
// 1e-2 per (row, head): P is rounded to bf16 before P V, and the output to bf16.
std::vector<float> RunPrefill(const Launch& l, const Fp8Kv* fp8 = nullptr) {
  std::vector<PrefillTile> tiles;
  PlanPrefillTiles(l.chunks, l.G, tiles);
  // The inputs are bf16 bit patterns.
  DeviceBuffer<uint16_t> d_k(l.k), d_v(l.v), d_qkv(l.qkv);
  DeviceBuffer<uint8_t> d_k8(fp8 ? fp8->k : std::vector<uint8_t>{}),
      d_v8(fp8 ? fp8->v : std::vector<uint8_t>{});
  auto bf16 = [](const DeviceBuffer<uint16_t>& b) {
    return reinterpret_cast<const __nv_bfloat16*>(b.get());
  };
  DeviceBuffer<__nv_bfloat16> d_out(static_cast<size_t>(l.rows) * l.H() * l.D);
  DeviceBuffer<int32_t> d_tables(l.tables);
  DeviceBuffer<PrefillChunk> d_chunks(l.chunks);
  DeviceBuffer<PrefillTile> d_tiles(tiles);
  PrefillAttentionParams p = l.Params();
  p.qkv = bf16(d_qkv);
  p.k_cache = fp8 ? static_cast<const void*>(d_k8.get()) : bf16(d_k);
  p.v_cache = fp8 ? static_cast<const void*>(d_v8.get()) : bf16(d_v);
  if (fp8) p.kv = fp8->format;
  p.block_tables = d_tables.get();
  p.chunks = d_chunks.get();
  p.tiles = d_tiles.get();
  p.num_tiles = static_cast<int32_t>(tiles.size());
  p.out = d_out.get();
  EXPECT_EQ(PreparePrefillAttention(l.D), cudaSuccess);
  EXPECT_EQ(LaunchPrefillAttention(p, 0), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return FromBf16Vector(d_out.Download());
}

TEST(PrefillAttentionKernelTest, SeveralSequencesEveryHeadSizeAndGroup) {
  LLM_REQUIRE_GPU();
  // Prompts of 1, 15 and 17 tokens, chunks that continue earlier ones mid-block, scattered
  // blocks, several sequences in one launch.
  const std::vector<Seq> seqs = {{0, 1}, {0, 15}, {0, 17}, {40, 17}, {203, 70}, {5, 1}};
  uint32_t seed = 1;
  for (const int32_t D : {16, 32, 64, 128}) {
    for (const int32_t G : {1, 4, 7, 8}) {
      const Launch l = MakeLaunch(D, G, G == 8 ? 1 : 2, 0, seqs, seed++);
      ExpectMatchesReference(l, RunPrefill(l), "several sequences");
    }
  }
}

TEST(PrefillAttentionKernelTest, SlidingWindow) {
  LLM_REQUIRE_GPU();
  const std::vector<Seq> seqs = {{0, 150}, {90, 60}, {300, 33}};
  uint32_t seed = 50;
  for (const int32_t window : {1, 37, 64, 100}) {
    for (const int32_t G : {4, 7}) {
      const Launch l = MakeLaunch(128, G, 2, window, seqs, seed++);
      ExpectMatchesReference(l, RunPrefill(l), "sliding window");
    }
  }
}

TEST(PrefillAttentionKernelTest, LongPrompts) {
  LLM_REQUIRE_GPU();
  for (const int32_t G : {1, 4, 7, 8}) {
    const Launch l1k = MakeLaunch(128, G, 2, 0, {{0, 1000}}, 70 + G);
    ExpectMatchesReference(l1k, RunPrefill(l1k), "1,000 tokens");
  }
  const Launch l4k = MakeLaunch(64, 4, 2, 0, {{0, 4095}}, 80);
  ExpectMatchesReference(l4k, RunPrefill(l4k), "4,095 tokens");
  const Launch late = MakeLaunch(128, 8, 1, 0, {{3583, 512}, {0, 3}, {1000, 64}}, 81);
  ExpectMatchesReference(late, RunPrefill(late), "late chunks");
}

// An FP8 cache (issue 30): decode rows on both kernels, splits 1, 5 and 64, and the tiled
// prefill kernel, against the double reference on what the cache's bytes stand for; contexts 1
// to 4,095, head dims 16 to 128 (the tensor-core kernel's 64 and 128), groups 1, 4, 7 and 8,
// sliding windows.
TEST(AttentionKernelTest, Fp8CacheDecodeRowsMatchTheDecodedReference) {
  LLM_REQUIRE_GPU();
  const int32_t contexts[] = {1, 17, 1000, 4095, 300};
  uint32_t seed = 90;
  for (const int32_t D : {16, 32, 64, 128}) {
    for (const int32_t G : {1, 4, 7, 8}) {
      std::vector<Seq> seqs;
      for (int32_t r = 0; r < 7; ++r) seqs.push_back({contexts[r % 5] - 1, 1});
      // A sliding window at one group of each head size.
      Launch l = MakeLaunch(D, G, G == 8 ? 1 : 2, /*window=*/G == 7 ? 100 : 0, seqs, seed++);
      const Fp8Kv fp8 = QuantiseCache(l);
      for (const bool tensor_cores : {true, false}) {
        if (tensor_cores && D < 64) continue;  // the CUDA-core kernel's head sizes
        for (const int32_t splits : {1, 5, 64}) {
          const std::string what = "FP8 cache, D " + std::to_string(D) + ", G " +
                                   std::to_string(G) + ", splits " + std::to_string(splits) +
                                   (tensor_cores ? ", tensor cores" : "");
          ExpectMatchesReference(l, RunDecode(l, splits, tensor_cores, &fp8), what.c_str());
        }
      }
    }
  }
}

TEST(PrefillAttentionKernelTest, Fp8CacheMatchesTheDecodedReference) {
  LLM_REQUIRE_GPU();
  const std::vector<Seq> seqs = {{0, 1}, {0, 17}, {40, 17}, {203, 70}, {0, 1000}};
  uint32_t seed = 120;
  for (const int32_t D : {16, 32, 64, 128}) {
    for (const int32_t G : {1, 4, 7, 8}) {
      Launch l = MakeLaunch(D, G, G == 8 ? 1 : 2, 0, seqs, seed++);
      const Fp8Kv fp8 = QuantiseCache(l);
      ExpectMatchesReference(l, RunPrefill(l, &fp8), "FP8 cache");
    }
  }
  Launch window = MakeLaunch(128, 4, 2, 37, {{0, 150}, {90, 60}}, seed++);
  const Fp8Kv fp8 = QuantiseCache(window);
  ExpectMatchesReference(window, RunPrefill(window, &fp8), "FP8 cache, sliding window");
}

}  // namespace
}  // namespace llm::kernels
