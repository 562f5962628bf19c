#include "worker/engine/block_allocator.h"

#include <set>

#include "gtest/gtest.h"

namespace llm::engine {
namespace {

TEST(BlockAllocatorTest, AllocatesDistinctBlocksAndRefusesOverdraft) {
  BlockAllocator a(10);
  auto x = a.Allocate(4);
  auto y = a.Allocate(6);
  ASSERT_TRUE(x && y);
  std::set<int32_t> all(x->begin(), x->end());
  all.insert(y->begin(), y->end());
  EXPECT_EQ(all.size(), 10u);
  EXPECT_EQ(a.num_free(), 0);
  EXPECT_FALSE(a.Allocate(1).has_value());
  a.Free(*x);
  EXPECT_EQ(a.num_free(), 4);
  EXPECT_FALSE(a.Allocate(5).has_value());
  EXPECT_EQ(a.num_free(), 4);  // a refused allocation takes nothing
  EXPECT_TRUE(a.Allocate(4).has_value());
}

TEST(BlockAllocatorTest, BlocksFor) {
  EXPECT_EQ(BlocksFor(1, 16), 1);
  EXPECT_EQ(BlocksFor(16, 16), 1);
  EXPECT_EQ(BlocksFor(17, 16), 2);
}

}  // namespace
}  // namespace llm::engine
