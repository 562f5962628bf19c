#include "common/philox.h"

#include "gtest/gtest.h"

namespace llm {
namespace {

// Known-answer test from the Random123 distribution (kat_vectors: philox4x32 10 rounds,
// counter = {0,0,0,0}, key = {0,0}).
TEST(PhiloxTest, MatchesReferenceVector) {
  const Philox4x32 r = Philox4x32x10(0, 0, 0);
  EXPECT_EQ(r.v[0], 0x6627e8d5u);
  EXPECT_EQ(r.v[1], 0xe169c58du);
  EXPECT_EQ(r.v[2], 0xbc57ac4cu);
  EXPECT_EQ(r.v[3], 0x9b00dbd8u);
  // counter = {243f6a88, 85a308d3, 13198a2e, 03707344}, key = {a4093822, 299f31d0}.
  const Philox4x32 pi =
      Philox4x32x10(0x85a308d3243f6a88ull, 0x0370734413198a2eull, 0x299f31d0a4093822ull);
  EXPECT_EQ(pi.v[0], 0xd16cfe09u);
  EXPECT_EQ(pi.v[1], 0x94fdccebu);
  EXPECT_EQ(pi.v[2], 0x5001e420u);
  EXPECT_EQ(pi.v[3], 0x24126ea1u);
}

TEST(PhiloxTest, UniformIsInRangeAndDependsOnSeedAndCounter) {
  double sum = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    const double u = UniformDouble(42, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
  EXPECT_NE(UniformDouble(1, 0), UniformDouble(2, 0));
  EXPECT_NE(UniformDouble(1, 0), UniformDouble(1, 1));
  EXPECT_EQ(UniformDouble(7, 3), UniformDouble(7, 3));
}

}  // namespace
}  // namespace llm
