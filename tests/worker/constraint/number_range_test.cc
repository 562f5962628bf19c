#include "worker/constraint/number_range.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/constraint/regex_language.h"

namespace llm::constraint {
namespace {

using ::testing::HasSubstr;

using Language = RegexLanguage;

Decimal D(const std::string& text) {
  auto d = ParseDecimal(text);
  EXPECT_TRUE(d.ok()) << text << ": " << d.status();
  return d.value_or(Decimal{});
}

TEST(DecimalTest, ParsesComparesAndRounds) {
  EXPECT_EQ(D("-12.500").fraction, "5");
  EXPECT_TRUE(D("-12.500").negative);
  EXPECT_FALSE(D("-0.000").negative);  // zero has no sign
  for (const char* bad : {"", "-", "1.", ".5", "1e3", "1..2", "0x10", "+1", "1 "}) {
    EXPECT_FALSE(ParseDecimal(bad).ok()) << bad;
  }
  EXPECT_THAT(ParseDecimal("0." + std::string(40, '1')).status().message(),
              HasSubstr("more than 32 digits"));
  EXPECT_EQ(DecimalOf(0.1)->fraction, "1");  // shortest digits, not 0.1000000000000000055...
  EXPECT_EQ(DecimalOf(1e-7)->fraction, "0000001");
  EXPECT_EQ(DecimalOf(-2.0)->fraction, "");
  EXPECT_FALSE(DecimalOf(1e-40).ok());
  const std::vector<std::string> ascending = {"-3",    "-2.5", "-2.05",  "-2",  "-0.001", "0",
                                              "0.001", "0.01", "0.0101", "0.1", "2",      "10.5"};
  for (size_t i = 0; i < ascending.size(); ++i) {
    for (size_t j = 0; j < ascending.size(); ++j) {
      const int want = i < j ? -1 : i > j ? 1 : 0;
      EXPECT_EQ(Compare(D(ascending[i]), D(ascending[j])), want)
          << ascending[i] << " vs " << ascending[j];
    }
  }
  EXPECT_EQ(Ceil(D("2.5")), 3);
  EXPECT_EQ(Floor(D("2.5")), 2);
  EXPECT_EQ(Ceil(D("-2.5")), -2);
  EXPECT_EQ(Floor(D("-2.5")), -3);
  EXPECT_EQ(Ceil(D("-2")), -2);
  EXPECT_EQ(Floor(D("7")), 7);
}

// Value of a plain decimal with at most 4 significant places after the point, times 10^4.
int64_t Scaled(const std::string& text) {
  const Decimal d = D(text);
  std::string fraction = d.fraction;
  EXPECT_LE(fraction.size(), 4u) << text;
  fraction.resize(4, '0');
  const int64_t v = static_cast<int64_t>(d.whole) * 10000 + std::stoll(fraction);
  return d.negative ? -v : v;
}

// Numbers k / 10^4, each written without and with trailing zeros, and their values k.
struct Numbers {
  std::vector<std::string> texts;
  std::vector<int64_t> values;

  void Add(int64_t k) {
    const int64_t a = k < 0 ? -k : k;
    std::string fraction = absl::StrCat(10000 + a % 10000).substr(1);
    while (!fraction.empty() && fraction.back() == '0') fraction.pop_back();
    std::string text = absl::StrCat(k < 0 ? "-" : "", a / 10000);
    if (!fraction.empty()) text += "." + fraction;
    texts.push_back(text);
    texts.push_back(text + (fraction.empty() ? ".0" : "00"));
    values.insert(values.end(), 2, k);
  }
};

// Every number from -4 to 4 in steps of 0.0007, each written without and with trailing zeros,
// against the same comparison done on integers.
TEST(NumberRangeTest, DecimalBoundsAreExact) {
  Numbers numbers;
  for (int64_t k = -40000; k <= 40000; k += 7) numbers.Add(k);
  const std::vector<std::string>& texts = numbers.texts;
  const std::vector<int64_t>& values = numbers.values;
  const std::vector<std::string> bounds = {"-2.5", "-1", "-0.125", "0",     "0.05",
                                           "0.5",  "1",  "1.25",   "2.999", "3"};
  std::vector<std::optional<NumberBound>> sides = {std::nullopt};
  for (const std::string& b : bounds) {
    for (bool exclusive : {false, true}) sides.push_back(NumberBound{D(b), exclusive});
  }
  int cases = 0;
  for (const auto& lo : sides) {
    for (const auto& hi : sides) {
      const std::string pattern = NumberRangeRegex(lo, hi);
      const auto scaled = [](const NumberBound& b) {
        const Decimal& d = b.value;
        return Scaled(absl::StrCat(d.negative ? "-" : "", d.whole, d.fraction.empty() ? "" : ".",
                                   d.fraction));
      };
      const int64_t lo_s = lo ? scaled(*lo) : 0, hi_s = hi ? scaled(*hi) : 0;
      const auto in = [&](int64_t v) {
        return (!lo || (lo->exclusive ? v > lo_s : v >= lo_s)) &&
               (!hi || (hi->exclusive ? v < hi_s : v <= hi_s));
      };
      bool any = false;
      for (int64_t k = -40000; k <= 40000 && !any; ++k) any = in(k);
      if (pattern.empty()) {
        EXPECT_FALSE(any) << "no pattern, yet a number is within the bounds";
        continue;
      }
      ++cases;
      const Language m(pattern);
      for (size_t i = 0; i < texts.size(); ++i) {
        ASSERT_EQ(m(texts[i]), in(values[i])) << texts[i] << " under " << pattern;
      }
      for (const char* never : {"01", "1.", ".5", "00.5", "--1", "1.2.3"}) {
        EXPECT_FALSE(m(never)) << never << " under " << pattern;
      }
      // JSON's -0 is zero: written only where no bound is (as any number may be).
      EXPECT_EQ(m("-0"), !lo && !hi) << pattern;
      // An exponent only where no bound can be crossed with one.
      EXPECT_EQ(m("1e0"), !hi && (!lo || Compare(lo->value, Decimal{}) < 0 ||
                                  (IsZero(lo->value) && !lo->exclusive)))
          << pattern;
    }
  }
  EXPECT_GT(cases, 200);
}

TEST(NumberRangeTest, FarDigitsAndLargeIntegerParts) {
  // 0.1 < v <= 0.1000000000000000000001: only digits past the twentieth tell them apart.
  const Language thin(NumberRangeRegex(NumberBound{D("0.1"), true},
                                       NumberBound{D("0.1000000000000000000001"), false}));
  EXPECT_FALSE(thin("0.1"));
  EXPECT_FALSE(thin("0.10000000000000000000000"));
  EXPECT_TRUE(thin("0.10000000000000000000001"));
  EXPECT_TRUE(thin("0.1000000000000000000001"));
  EXPECT_TRUE(thin("0.100000000000000000000100"));
  EXPECT_FALSE(thin("0.10000000000000000000011"));
  const Language big(NumberRangeRegex(NumberBound{D("999999999999.5"), false}, std::nullopt));
  EXPECT_FALSE(big("999999999999.4999"));
  EXPECT_TRUE(big("999999999999.5"));
  EXPECT_TRUE(big("1000000000000"));
  EXPECT_TRUE(big("123456789012345678901234567890"));
  const Language ints(IntegerRangeRegex(-15, 1000000000000000));
  EXPECT_TRUE(ints("-15"));
  EXPECT_FALSE(ints("-16"));
  EXPECT_TRUE(ints("1000000000000000"));
  EXPECT_FALSE(ints("1000000000000001"));
  EXPECT_EQ(IntegerRangeRegex(3, 2), "");
}

// Every multiple of 0.0025 from -4 to 4 and every multiple of 0.0001 from -0.03 to 0.03, each
// written without and with trailing zeros, under steps of each kind and bounds on either side,
// against the same test done on integers. A step that is served only between two bounds
// (3, 0.3, 1.5, 7) fails with one missing.
TEST(NumberRangeTest, MultiplesAreExact) {
  Numbers numbers;
  for (int64_t k = -40000; k <= 40000; k += 25) numbers.Add(k);
  for (int64_t k = -300; k <= 300; ++k) {
    if (k % 25 != 0) numbers.Add(k);
  }
  const std::vector<std::string>& texts = numbers.texts;
  const std::vector<int64_t>& values = numbers.values;
  std::vector<std::optional<NumberBound>> sides = {std::nullopt};
  for (const char* b : {"-2.5", "-1", "0", "0.05", "1.25", "3"}) {
    for (bool exclusive : {false, true}) sides.push_back(NumberBound{D(b), exclusive});
  }
  const std::vector<std::string> bounded_only = {"3", "0.3", "1.5", "7"};
  int cases = 0;
  for (const std::string step : {"0.01", "0.1", "1", "0.5", "0.25", "0.05", "2", "5", "25", "3",
                                 "0.3", "1.5", "7", "0.0001"}) {
    const int64_t unit = Scaled(step);
    for (bool integer : {false, true}) {
      for (const auto& lo : sides) {
        for (const auto& hi : sides) {
          auto pattern = MultiplesRegex(lo, hi, D(step), integer);
          const bool unserved = absl::c_linear_search(bounded_only, step) && (!lo || !hi);
          if (!pattern.ok()) {
            EXPECT_TRUE(unserved) << step << ": " << pattern.status();
            EXPECT_THAT(pattern.status().message(), HasSubstr("needs both bounds"));
            continue;
          }
          EXPECT_FALSE(unserved) << step << " served without both bounds";
          const auto scaled = [](const NumberBound& b) {
            const Decimal& d = b.value;
            return Scaled(absl::StrCat(d.negative ? "-" : "", d.whole,
                                       d.fraction.empty() ? "" : ".", d.fraction));
          };
          const int64_t lo_s = lo ? scaled(*lo) : 0, hi_s = hi ? scaled(*hi) : 0;
          const auto in = [&](int64_t v) {
            return v % unit == 0 && (!integer || v % 10000 == 0) &&
                   (!lo || (lo->exclusive ? v > lo_s : v >= lo_s)) &&
                   (!hi || (hi->exclusive ? v < hi_s : v <= hi_s));
          };
          if (pattern->empty()) continue;
          ++cases;
          const Language m(*pattern);
          for (size_t i = 0; i < texts.size(); ++i) {
            const bool want =
                in(values[i]) && !(integer && texts[i].find('.') != std::string::npos);
            ASSERT_EQ(m(texts[i]), want) << texts[i] << " under multipleOf " << step
                                         << (integer ? " (integer): " : ": ") << *pattern;
          }
          EXPECT_FALSE(m("1e0")) << *pattern;
        }
      }
    }
  }
  EXPECT_GT(cases, 1500);
}

// Far from zero: endings decide, and listed multiples stop at 1,000.
TEST(NumberRangeTest, MultiplesFarFromZero) {
  const Language fives(*MultiplesRegex(NumberBound{D("12"), false}, std::nullopt, D("5"), true));
  for (const char* ok : {"15", "20", "1000000005", "99999999999999990"})
    EXPECT_TRUE(fives(ok)) << ok;
  for (const char* bad : {"10", "12", "16", "1000000006", "-5"}) EXPECT_FALSE(fives(bad)) << bad;
  const Language eighths(
      *MultiplesRegex(std::nullopt, NumberBound{D("-1001"), true}, D("8"), true));
  for (const char* ok : {"-1008", "-123456"}) EXPECT_TRUE(eighths(ok)) << ok;
  for (const char* bad : {"-1000", "-1001", "-1012", "0", "8"}) EXPECT_FALSE(eighths(bad)) << bad;
  const Language cents(*MultiplesRegex(NumberBound{D("0"), false}, std::nullopt, D("0.01"), false));
  for (const char* ok : {"0", "19.99", "1000000.5", "3.100"}) EXPECT_TRUE(cents(ok)) << ok;
  for (const char* bad : {"19.999", "-0.01", "1e2", "0.001"}) EXPECT_FALSE(cents(bad)) << bad;
  EXPECT_TRUE(MultiplesRegex(NumberBound{D("0"), false}, NumberBound{D("6993"), false}, D("7"),
                             true)
                  .ok());  // 1,000 multiples
  EXPECT_THAT(
      MultiplesRegex(NumberBound{D("0"), false}, NumberBound{D("7000"), false}, D("7"), true)
          .status()
          .message(),
      HasSubstr("at most 1000 multiples"));
  for (const char* bad : {"0", "-1"}) {
    EXPECT_THAT(MultiplesRegex(std::nullopt, std::nullopt, D(bad), false).status().message(),
                HasSubstr("a step above 0"));
  }
}

// Integer steps up to 10^18 are served by their endings without bounds, and an integer's step
// with more than 18 places is the integer it implies; a number's is refused.
TEST(NumberRangeTest, IntegerStepsOfAnySize) {
  const Language tens(*MultiplesRegex(std::nullopt, std::nullopt, D("10000000"), true));
  for (const char* ok : {"0", "10000000", "-20000000", "990000000", "123450000000"}) {
    EXPECT_TRUE(tens(ok)) << ok;
  }
  for (const char* bad : {"1000000", "10000001", "-5000000", "1e7"}) EXPECT_FALSE(tens(bad)) << bad;
  const Language fifty(
      *MultiplesRegex(NumberBound{D("0"), false}, std::nullopt, D("50000000000"), true));
  for (const char* ok : {"0", "50000000000", "100000000000", "950000000000"}) {
    EXPECT_TRUE(fifty(ok)) << ok;
  }
  for (const char* bad : {"10000000000", "-50000000000", "50000000001"}) {
    EXPECT_FALSE(fifty(bad)) << bad;
  }
  const Language any(*MultiplesRegex(std::nullopt, std::nullopt, D("0.0000000000000000001"), true));
  for (const char* ok : {"0", "7", "-3", "123456789"}) EXPECT_TRUE(any(ok)) << ok;
  EXPECT_FALSE(any("1.5"));
  const Language threes(*MultiplesRegex(NumberBound{D("0"), false}, NumberBound{D("30"), false},
                                        D("0.00000000000000000003"), true));
  for (int v = -3; v <= 33; ++v)
    EXPECT_EQ(threes(std::to_string(v)), v >= 0 && v <= 30 && v % 3 == 0) << v;
  EXPECT_THAT(MultiplesRegex(std::nullopt, std::nullopt, D("0.0000000000000000001"), false)
                  .status()
                  .message(),
              HasSubstr("18 places"));
}

}  // namespace
}  // namespace llm::constraint
