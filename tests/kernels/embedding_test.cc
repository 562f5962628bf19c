#include "kernels/embedding.h"

#include <cuda_runtime.h>

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/device.h"
#include "worker/model/dtype.h"

namespace llm::kernels {
namespace {

class EmbeddingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "GPU test skipped: " << NoDeviceReason();
  }
};

// The reference is a plain row copy (the CPU runner's embedding); the kernel must be exact.
TEST_F(EmbeddingTest, MatchesRowGatherExactlyOnOddShapes) {
  std::mt19937 rng(1);
  for (int hidden : {8, 13, 64, 4096}) {
    for (int num_tokens : {1, 7, 33}) {
      const int vocab = 101;
      std::vector<uint16_t> table(vocab * hidden);
      for (auto& x : table) x = model::F32ToBf16(std::uniform_real_distribution<float>(-1, 1)(rng));
      std::vector<int32_t> ids(num_tokens);
      for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
      ids[0] = vocab + 5;  // out of range: zeros
      int32_t* d_ids;
      __nv_bfloat16 *d_table, *d_out;
      ASSERT_EQ(cudaMalloc(&d_ids, ids.size() * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&d_table, table.size() * 2), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&d_out, size_t(num_tokens) * hidden * 2), cudaSuccess);
      cudaMemcpy(d_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(d_table, table.data(), table.size() * 2, cudaMemcpyHostToDevice);
      ASSERT_EQ(LaunchEmbedding({d_ids, d_table, d_out, num_tokens, hidden, vocab}, nullptr),
                cudaSuccess);
      std::vector<uint16_t> out(size_t(num_tokens) * hidden);
      ASSERT_EQ(cudaMemcpy(out.data(), d_out, out.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      for (int t = 0; t < num_tokens; ++t) {
        for (int i = 0; i < hidden; ++i) {
          const uint16_t want =
              ids[t] >= vocab ? model::F32ToBf16(0.0f) : table[ids[t] * hidden + i];
          ASSERT_EQ(out[t * hidden + i], want) << "hidden " << hidden << " token " << t;
        }
      }
      cudaFree(d_ids);
      cudaFree(d_table);
      cudaFree(d_out);
    }
  }
}

}  // namespace
}  // namespace llm::kernels
