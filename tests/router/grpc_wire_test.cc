#include "router/relay/grpc_wire.h"

#include "gtest/gtest.h"

namespace llm::router::relay {
namespace {

using std::chrono::nanoseconds;

TEST(GrpcWireTest, ParsesTimeoutsInEveryUnitAndRejectsMalformedOnes) {
  EXPECT_EQ(*ParseGrpcTimeout("100m"), std::chrono::milliseconds(100));
  EXPECT_EQ(*ParseGrpcTimeout("2S"), std::chrono::seconds(2));
  EXPECT_EQ(*ParseGrpcTimeout("3M"), std::chrono::minutes(3));
  EXPECT_EQ(*ParseGrpcTimeout("1H"), std::chrono::hours(1));
  EXPECT_EQ(*ParseGrpcTimeout("7u"), std::chrono::microseconds(7));
  EXPECT_EQ(*ParseGrpcTimeout("9n"), nanoseconds(9));
  for (const char* bad : {"", "m", "12", "1x", "-1S", "123456789S", "1.5S"}) {
    EXPECT_FALSE(ParseGrpcTimeout(bad).has_value()) << bad;
  }
}

TEST(GrpcWireTest, HugeTimeoutsAreClampedInsteadOfOverflowing) {
  // grpc-go sends 2562048H for the longest duration; 99999999H is the largest legal value.
  for (const char* huge : {"2562048H", "99999999H", "99999999M"}) {
    const auto t = ParseGrpcTimeout(huge);
    ASSERT_TRUE(t.has_value()) << huge;
    EXPECT_GT(t->count(), 0) << huge;
    EXPECT_GE(*t, std::chrono::hours(24 * 365 * 99)) << huge;
  }
}

TEST(GrpcWireTest, FormatsTheRemainingTimeRoundedUp) {
  EXPECT_EQ(FormatGrpcTimeout(std::chrono::microseconds(1500)), "2m");
  EXPECT_EQ(FormatGrpcTimeout(nanoseconds(0)), "1m");
  EXPECT_EQ(FormatGrpcTimeout(std::chrono::seconds(5)), "5000m");
  EXPECT_EQ(FormatGrpcTimeout(std::chrono::hours(24 * 365)), "31536000S");
  const auto round_trip = ParseGrpcTimeout(FormatGrpcTimeout(std::chrono::hours(500000)));
  ASSERT_TRUE(round_trip.has_value());
  EXPECT_GE(*round_trip, std::chrono::hours(500000));
}

TEST(GrpcWireTest, PercentEncodingRoundTrips) {
  const std::string message = "worker 10.0.0.1:50051 failed: 100% \xC3\xA9t\xC3\xA9\n";
  const std::string encoded = PercentEncode(message);
  EXPECT_EQ(encoded.find('\n'), std::string::npos);
  EXPECT_NE(encoded.find("%25"), std::string::npos);
  EXPECT_EQ(PercentDecode(encoded), message);
  EXPECT_EQ(PercentDecode("50%"), "50%");  // a stray '%' stays
}

}  // namespace
}  // namespace llm::router::relay
