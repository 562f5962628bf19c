// JSON numbers within bounds, as byte regexes (byte_regex.h), for JSON Schema's `minimum`,
// `maximum`, `exclusiveMinimum` and `exclusiveMaximum`. Pure logic.
//
// Exact in decimal: a bound is the decimal a schema writes (read as a double, as JSON parsers
// read it, then taken at its shortest round-trip digits: 0.1 is 0.1), and a number is compared
// with it digit by digit, so `maximum: 0.3` admits 0.3 and 0.2999 but not 0.30001. Numbers are
// written as JSON writes them: no leading zeros, a fraction of at least one digit, and no
// exponent where a bound could be crossed with one (only a number with no upper bound, whose
// lower bound is absent, below 0, or an inclusive 0, may have one). A validator that reads numbers
// as doubles may round a value within about 10^-16 of its magnitude onto a bound
// (0.99999999999999999 is 1.0 as a double), so it may refuse such a value under an exclusive bound
// that it is, in decimal, within.
#ifndef LLM_WORKER_CONSTRAINT_NUMBER_RANGE_H_
#define LLM_WORKER_CONSTRAINT_NUMBER_RANGE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"

namespace llm::constraint {

// A decimal: sign, integer part, and the digits after the point without trailing zeros. Zero
// is never negative.
struct Decimal {
  bool negative = false;
  uint64_t whole = 0;
  std::string fraction;
};

inline constexpr int kMaxBoundFractionDigits = 32;

// "-12.50", "3", "0.001" (no exponent); an error names what is wrong. At most
// kMaxBoundFractionDigits significant digits after the point, and an integer part within
// uint64_t.
absl::StatusOr<Decimal> ParseDecimal(std::string_view text);
// The shortest decimal that reads back as `value` (finite, |value| <= 1e18).
absl::StatusOr<Decimal> DecimalOf(double value);
// <0, 0, >0 as a is below, equal to or above b.
int Compare(const Decimal& a, const Decimal& b);
Decimal Negate(Decimal d);
bool IsZero(const Decimal& d);
// The least integer >= d and the greatest integer <= d, as signed values (|d| < 2^62).
int64_t Ceil(const Decimal& d);
int64_t Floor(const Decimal& d);

struct NumberBound {
  Decimal value;
  bool exclusive = false;
};

// Any JSON number: optional minus, integer part, optional fraction and exponent.
std::string AnyNumberRegex();
// Non-negative integers in [lo, hi] without leading zeros; no `hi`: unbounded.
std::string UIntRangeRegex(uint64_t lo, std::optional<uint64_t> hi);
// JSON integers in [lo, hi] (either side open when absent); "" when lo > hi.
std::string IntegerRangeRegex(std::optional<int64_t> lo, std::optional<int64_t> hi);
// JSON numbers v with lo <= v (lo < v when exclusive) and v <= hi (v < hi), either side open
// when absent; "" when no number is within them.
std::string NumberRangeRegex(const std::optional<NumberBound>& lo,
                             const std::optional<NumberBound>& hi);

// An integer's bounds: one between integers rounded inwards (minimum 2.5 is 3), an exclusive
// integer one moved by one.
std::pair<std::optional<int64_t>, std::optional<int64_t>> IntegerBounds(
    const std::optional<NumberBound>& lo, const std::optional<NumberBound>& hi);
// JSON numbers (integers, when `integer`) within the bounds that are multiples of `step`
// (`multipleOf`, above 0), written without an exponent; "" when none is. Served: for a
// number, steps 1, 0.1, 0.01, ... (at most that many places after the point), 1/q of a power
// of ten (0.5, 0.25, 0.05; at most kMaxSuffixes of them below 1) and integers, with at most
// 18 places; for an integer, any step (reduced to the integer it implies: 1.5 is 3, 0.5 and
// 1e-20 are 1). An integer step k is served with any bounds where k divides a power of ten
// up to 10^18 (2, 5, 25, 1000, 10^9; at most kMaxSuffixes endings), and any other step (7,
// 0.3) with both bounds and at most 1,000 multiples between them; otherwise an error says
// what is served. A step has at most 18 significant digits.
absl::StatusOr<std::string> MultiplesRegex(const std::optional<NumberBound>& lo,
                                           const std::optional<NumberBound>& hi,
                                           const Decimal& step, bool integer);

}  // namespace llm::constraint

#endif  // LLM_WORKER_CONSTRAINT_NUMBER_RANGE_H_
