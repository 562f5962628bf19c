#include "worker/model/dtype.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace llm::model {
namespace {

TEST(DTypeTest, Bf16RoundTripAndRounding) {
  for (float f : {0.0f, 1.0f, -2.5f, 3.140625f, 0.0009765625f, 65536.0f, -1e20f}) {
    const float exact = Bf16ToF32(F32ToBf16(f));  // nearest bf16
    EXPECT_EQ(Bf16ToF32(F32ToBf16(exact)), exact) << f;
    EXPECT_NEAR(exact, f, std::fabs(f) / 128) << f;
  }
  // 1 + 2^-8 is halfway between two bf16 values: ties go to even (1.0).
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DTypeTest, F16ConversionsAgree) {
  // Every f16 bit pattern that is not NaN survives f16 -> f32 -> f16.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToF16(f), h) << std::hex << h;
  }
  EXPECT_EQ(F16ToF32(0x3C00), 1.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(F32ToF16(1e6f), 0x7C00);                   // overflow to inf
  EXPECT_EQ(F32ToF16(1.0f + 1.0f / 2048), 0x3C00);     // tie to even
}

TEST(DTypeTest, ParsesNames) {
  EXPECT_EQ(ParseDType("BF16"), DType::kBF16);
  EXPECT_EQ(ParseDType("I64"), DType::kI64);
  EXPECT_FALSE(ParseDType("Q4_K").has_value());
  EXPECT_EQ(DTypeSize(DType::kF8E4M3), 1u);
  EXPECT_FALSE(IsWeightDType(DType::kI32));
}

}  // namespace
}  // namespace llm::model
