#include "common/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace llm {
namespace {

// The finite non-negative E4M3 values in order of their codes 0x00..0x7E, from the format's
// definition written out independently of Fp8E4M3ToFloat.
std::vector<double> PositiveValues() {
  std::vector<double> v;
  for (int code = 0; code < 0x7F; ++code) {
    const int exp = code >> 3, mant = code & 7;
    v.push_back(exp == 0 ? mant * std::ldexp(1.0, -9)
                         : (1.0 + mant / 8.0) * std::ldexp(1.0, exp - 7));
  }
  return v;
}

// Nearest code by search, ties to the even code; saturating.
uint8_t NearestCode(float f) {
  static const std::vector<double> values = PositiveValues();
  if (std::isnan(f)) return 0x7F;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 448.0) return sign | 0x7E;
  int best = 0;
  for (int code = 1; code < 0x7F; ++code) {
    const double d = std::fabs(values[code] - a), bd = std::fabs(values[best] - a);
    if (d < bd || (d == bd && code % 2 == 0)) best = code;
  }
  return static_cast<uint8_t>(sign | best);
}

TEST(Fp8Test, DecodesEveryCodeAsTheFormatDefinesIt) {
  const std::vector<double> values = PositiveValues();
  for (int code = 0; code < 0x7F; ++code) {
    EXPECT_EQ(Fp8E4M3ToFloat(static_cast<uint8_t>(code)), static_cast<float>(values[code])) << code;
    EXPECT_EQ(Fp8E4M3ToFloat(static_cast<uint8_t>(code | 0x80)), -static_cast<float>(values[code]))
        << code;
  }
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0x7F)));
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0xFF)));
  EXPECT_EQ(Fp8E4M3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x01), 1.0f / 512.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x08), 1.0f / 64.0f);
}

TEST(Fp8Test, EveryValueEncodesToItsOwnCode) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;
    EXPECT_EQ(Fp8E4M3FromFloat(Fp8E4M3ToFloat(static_cast<uint8_t>(code))), code) << code;
  }
}

TEST(Fp8Test, MidpointsRoundToTheEvenCodeAndNeighboursToTheNearest) {
  const std::vector<double> values = PositiveValues();
  for (int code = 0; code + 1 < 0x7F; ++code) {
    const float mid = static_cast<float>((values[code] + values[code + 1]) / 2);
    const uint8_t even = static_cast<uint8_t>(code % 2 == 0 ? code : code + 1);
    EXPECT_EQ(Fp8E4M3FromFloat(mid), even) << code;
    EXPECT_EQ(Fp8E4M3FromFloat(-mid), even | 0x80) << code;
    EXPECT_EQ(Fp8E4M3FromFloat(std::nextafter(mid, 0.0f)), code) << code;
    EXPECT_EQ(Fp8E4M3FromFloat(std::nextafter(mid, 1000.0f)), code + 1) << code;
  }
}

TEST(Fp8Test, SaturatesAndKeepsNan) {
  EXPECT_EQ(Fp8E4M3FromFloat(448.0f), 0x7E);
  EXPECT_EQ(Fp8E4M3FromFloat(463.99f), 0x7E);
  EXPECT_EQ(Fp8E4M3FromFloat(464.0f), 0x7E);  // would round to 480, which E4M3 lacks
  EXPECT_EQ(Fp8E4M3FromFloat(1e30f), 0x7E);
  EXPECT_EQ(Fp8E4M3FromFloat(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(Fp8E4M3FromFloat(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(Fp8E4M3FromFloat(std::nanf("")) & 0x7F, 0x7F);
  EXPECT_EQ(Fp8E4M3FromFloat(1e-30f), 0x00);
  EXPECT_EQ(Fp8E4M3FromFloat(-1e-30f), 0x80);
}

TEST(Fp8Test, RandomFloatsMatchANearestSearch) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-14.0f, 10.0f);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (int i = 0; i < 20000; ++i) {
    const float f = unit(rng) * std::exp2(exponent(rng));
    ASSERT_EQ(Fp8E4M3FromFloat(f), NearestCode(f)) << f;
  }
}

TEST(Fp8Test, ScalesAndRoundTrips) {
  EXPECT_EQ(Fp8ScaleForAmax(448.0f), 1.0f);
  EXPECT_EQ(Fp8ScaleForAmax(0.0f), kFp8MinScale);
  const float s = Fp8ScaleForAmax(3.5f);
  EXPECT_FLOAT_EQ(Fp8RoundTrip(3.5f, s), 3.5f);  // the group's amax is exact: it maps to 448
  EXPECT_NEAR(Fp8RoundTrip(1.0f, s), 1.0f, 1.0f / 16);
}

}  // namespace
}  // namespace llm
