#include "worker/constraint/number_range.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace llm::constraint {
namespace {

constexpr char kNumberTail[] = R"((\.[0-9]+)?([eE][+-]?[0-9]+)?)";

std::string Group(const std::string& r) { return "(" + r + ")"; }

// Where the atom starting at r[i] ends: one character (or escape), a class, or a group.
size_t AtomEnd(std::string_view r, size_t i) {
  if (r[i] == '\\') return std::min(r.size(), i + 2);
  if (r[i] == '[') {
    while (++i < r.size() && r[i] != ']') {
      if (r[i] == '\\') ++i;
    }
    return std::min(r.size(), i + 1);
  }
  if (r[i] != '(') return i + 1;
  for (int depth = 0; i < r.size();) {
    if (r[i] == '\\' || r[i] == '[') {
      i = AtomEnd(r, i);
      continue;
    }
    if (r[i] == '(') ++depth;
    if (r[i] == ')' && --depth == 0) return i + 1;
    ++i;
  }
  return r.size();
}

// `r` where something follows or precedes it: grouped only where it has a '|' outside its
// groups. (Groups the patterns do not need would only deepen them: the regex parser bounds
// how deep groups nest, and a schema nests numbers inside its own groups.)
std::string Seq(const std::string& r) {
  for (size_t i = 0; i < r.size(); i = AtomEnd(r, i)) {
    if (r[i] == '|') return Group(r);
  }
  return r;
}

// `r`, optional: a single atom takes the '?' itself.
std::string Opt(const std::string& r) {
  return (!r.empty() && AtomEnd(r, 0) == r.size() ? r : Group(r)) + "?";
}

std::string DigitRange(char lo, char hi) {
  if (lo == hi) return std::string(1, lo);
  return absl::StrCat("[", std::string(1, lo), "-", std::string(1, hi), "]");
}

// Decimal strings of one length n, lo <= hi, as a regex.
std::string SameLength(const std::string& lo, const std::string& hi) {
  const size_t n = lo.size();
  if (n == 0) return "";
  if (lo == hi) return lo;
  if (n == 1) return DigitRange(lo[0], hi[0]);
  const std::string lo_rest = lo.substr(1), hi_rest = hi.substr(1);
  if (lo_rest == std::string(n - 1, '0') && hi_rest == std::string(n - 1, '9')) {
    return absl::StrCat(DigitRange(lo[0], hi[0]), "[0-9]{", n - 1, "}");
  }
  if (lo[0] == hi[0]) return std::string(1, lo[0]) + Seq(SameLength(lo_rest, hi_rest));
  std::vector<std::string> alts;
  alts.push_back(std::string(1, lo[0]) + Seq(SameLength(lo_rest, std::string(n - 1, '9'))));
  if (hi[0] - lo[0] > 1) {
    alts.push_back(absl::StrCat(DigitRange(lo[0] + 1, hi[0] - 1), "[0-9]{", n - 1, "}"));
  }
  alts.push_back(std::string(1, hi[0]) + Seq(SameLength(std::string(n - 1, '0'), hi_rest)));
  return Group(absl::StrJoin(alts, "|"));
}

// A language of digit strings (what follows the point, compared as 0.f): `more`, a regex of
// its non-empty members ("" when it has none), and whether it holds the empty string (no
// fraction written).
struct Digits {
  std::string more;
  bool empty = false;
};

// `places`: how many digits may be other than 0 (the rest are trailing zeros); -1: any.
int Next(int places) { return places <= 0 ? places : places - 1; }

// Any digits, places permitting: "" or one or more.
Digits AnyDigits(int places) {
  if (places < 0) return {"[0-9]+", true};
  if (places == 0) return {"0+", true};
  return {absl::StrCat("[0-9]{1,", places, "}0*"), true};
}

Digits Union(const std::vector<Digits>& parts) {
  Digits out;
  std::vector<std::string> alts;
  for (const Digits& d : parts) {
    if (!d.more.empty()) alts.push_back(d.more);
    out.empty = out.empty || d.empty;
  }
  out.more = alts.size() > 1 ? Group(absl::StrJoin(alts, "|")) : absl::StrJoin(alts, "");
  return out;
}

// The digit c, then a member of `rest` (which `Next(places)` bounds).
Digits Then(char c, const Digits& rest, int places) {
  if ((rest.more.empty() && !rest.empty) || (places == 0 && c != '0')) return {};
  std::string tail;
  if (!rest.more.empty()) tail = rest.empty ? Opt(rest.more) : Seq(rest.more);
  return {std::string(1, c) + tail, false};
}

// Strings whose first digit is in [lo, hi], then any digits.
Digits FirstIn(char lo, char hi, int places) {
  if (places == 0) hi = std::min(hi, '0');
  if (lo > hi) return {};
  const Digits rest = AnyDigits(Next(places));
  return {DigitRange(lo, hi) + Opt(rest.more), false};
}

// Non-zero fractions.
Digits Positive(int places) {
  if (places < 0) return {"0*[1-9][0-9]*", false};
  std::vector<Digits> alts;
  for (int zeros = 0; zeros < places; ++zeros) {
    alts.push_back(
        {absl::StrCat(
             zeros > 0 ? absl::StrCat("0{", zeros, "}") : "", "[1-9]",
             zeros + 1 < places ? absl::StrCat("([0-9]{1,", places - zeros - 1, "}0*)?") : "0*"),
         false});
  }
  return Union(alts);
}

// 0.f >= 0.d (> when not inclusive); d has no trailing zeros.
Digits AtLeast(std::string_view d, bool inclusive, int places) {
  if (d.empty()) return inclusive ? AnyDigits(places) : Positive(places);
  return Union({FirstIn(d[0] + 1, '9', places),
                Then(d[0], AtLeast(d.substr(1), inclusive, Next(places)), places)});
}

// 0.f <= 0.d (< when not inclusive). A non-empty d holds a digit other than 0, so the empty
// fraction (zero) is below it.
Digits AtMost(std::string_view d, bool inclusive, int places) {
  if (d.empty()) return inclusive ? Digits{"0+", true} : Digits{};
  return Union({Digits{"", true}, FirstIn('0', d[0] - 1, places),
                Then(d[0], AtMost(d.substr(1), inclusive, Next(places)), places)});
}

// 0.a <= 0.f <= 0.b, each < where not inclusive; 0.a <= 0.b.
Digits Between(std::string_view a, std::string_view b, bool a_inclusive, bool b_inclusive,
               int places) {
  if (a.empty() && b.empty()) return a_inclusive && b_inclusive ? Digits{"0+", true} : Digits{};
  const char x = a.empty() ? '0' : a[0], y = b.empty() ? '0' : b[0];
  const std::string_view a_rest = a.empty() ? a : a.substr(1), b_rest = b.empty() ? b : b.substr(1);
  const int next = Next(places);
  // The empty fraction is zero: above a only when a is zero and inclusive, and below any b but
  // a zero exclusive one.
  const Digits zero{"", a.empty() && a_inclusive && (!b.empty() || b_inclusive)};
  if (x == y) {
    return Union({zero, Then(x, Between(a_rest, b_rest, a_inclusive, b_inclusive, next), places)});
  }
  return Union({zero, Then(x, AtLeast(a_rest, a_inclusive, next), places),
                FirstIn(x + 1, y - 1, places), Then(y, AtMost(b_rest, b_inclusive, next), places)});
}

// The text after an integer part: nothing, or a point and the digits.
std::optional<std::string> FractionText(const Digits& d) {
  if (d.more.empty()) return d.empty ? std::optional<std::string>("") : std::nullopt;
  const std::string point = "\\." + Seq(d.more);
  return d.empty ? Opt(point) : point;
}

// A fraction's bound on one side: its digits and whether it is inclusive.
struct Side {
  std::string_view digits;
  bool inclusive;
};

// The fractions a number may have after a given integer part, between two optional sides.
using Fractions = std::function<Digits(std::optional<Side>, std::optional<Side>)>;

// Fractions with at most `places` significant digits (-1: any).
Fractions PlacesFractions(int places) {
  return [places](std::optional<Side> lo, std::optional<Side> hi) {
    if (lo && hi) return Between(lo->digits, hi->digits, lo->inclusive, hi->inclusive, places);
    if (lo) return AtLeast(lo->digits, lo->inclusive, places);
    if (hi) return AtMost(hi->digits, hi->inclusive, places);
    return AnyDigits(places);
  };
}

// Fractions from a list (digits without trailing zeros, "" for zero), each with any trailing
// zeros.
Fractions ListedFractions(std::vector<std::string> list) {
  return [list = std::move(list)](std::optional<Side> lo, std::optional<Side> hi) {
    std::vector<Digits> alts;
    for (const std::string& f : list) {
      const bool above = !lo || (lo->inclusive ? f >= lo->digits : f > lo->digits);
      const bool below = !hi || (hi->inclusive ? f <= hi->digits : f < hi->digits);
      if (!above || !below) continue;
      alts.push_back(f.empty() ? Digits{"0+", true} : Digits{f + "0*", false});
    }
    return Union(alts);
  };
}

// Non-negative decimals within [lo, hi] (no hi: unbounded), without an exponent.
std::vector<std::string> NonNegative(const NumberBound& lo, const std::optional<NumberBound>& hi,
                                     const Fractions& fractions) {
  const uint64_t a = lo.value.whole;
  const Side from{lo.value.fraction, !lo.exclusive};
  std::vector<std::string> alts;
  auto add = [&](std::string whole, const Digits& fraction) {
    if (auto text = FractionText(fraction)) alts.push_back(whole + *text);
  };
  if (!hi) {
    add(UIntRangeRegex(a + 1, std::nullopt), fractions(std::nullopt, std::nullopt));
    add(std::to_string(a), fractions(from, std::nullopt));
    return alts;
  }
  const uint64_t b = hi->value.whole;
  const Side to{hi->value.fraction, !hi->exclusive};
  if (a == b) {
    add(std::to_string(a), fractions(from, to));
    return alts;
  }
  if (a + 1 <= b - 1) add(UIntRangeRegex(a + 1, b - 1), fractions(std::nullopt, std::nullopt));
  add(std::to_string(a), fractions(from, std::nullopt));
  add(std::to_string(b), fractions(std::nullopt, to));
  return alts;
}

bool Empty(const std::optional<NumberBound>& lo, const std::optional<NumberBound>& hi) {
  if (!lo || !hi) return false;
  const int c = Compare(lo->value, hi->value);
  return c > 0 || (c == 0 && (lo->exclusive || hi->exclusive));
}

// Numbers within the bounds whose fractions `fractions` gives; an exponent only where no
// bound can be crossed with one (and `exponent`). "" when none is within them.
std::string DecimalRange(const std::optional<NumberBound>& lo, const std::optional<NumberBound>& hi,
                         const Fractions& fractions, bool exponent) {
  if (Empty(lo, hi)) return "";
  const Decimal zero;
  std::vector<std::string> alts;
  // Negative values x = -v: v > max(0, -hi) bounds v from below, -lo from above.
  if (!lo || lo->value.negative) {
    NumberBound v_lo{zero, true};
    if (hi && hi->value.negative) v_lo = {Negate(hi->value), hi->exclusive};
    std::optional<NumberBound> v_hi;
    if (lo) v_hi = NumberBound{Negate(lo->value), lo->exclusive};
    for (const std::string& a : NonNegative(v_lo, v_hi, fractions)) alts.push_back("-" + Seq(a));
  }
  // Non-negative values.
  if (!hi || (!hi->value.negative && !(IsZero(hi->value) && hi->exclusive))) {
    NumberBound v_lo{zero, false};
    if (lo && !lo->value.negative) v_lo = *lo;
    if (exponent && !hi && IsZero(v_lo.value) && !v_lo.exclusive) {
      alts.push_back(absl::StrCat("(0|[1-9][0-9]*)", kNumberTail));
    } else {
      for (const std::string& a : NonNegative(v_lo, hi, fractions)) alts.push_back(a);
    }
  }
  return alts.empty() ? "" : Group(absl::StrJoin(alts, "|"));
}

constexpr uint64_t kMaxListedMultiples = 1000;
constexpr uint64_t kMaxSuffixes = 200;

uint64_t Pow10(int n) {
  uint64_t v = 1;
  while (n-- > 0) v *= 10;
  return v;
}

// A positive decimal as p / 10^n; nullopt when p would reach 10^18. (n may pass 18 where the
// decimal is below 1 with few significant digits: 1e-20 is 1 / 10^20.)
struct Ratio {
  uint64_t p;
  int n;
};
std::optional<Ratio> RatioOf(const Decimal& d) {
  const int n = static_cast<int>(d.fraction.size());
  if (d.negative || IsZero(d)) return std::nullopt;
  if (n > 18) {
    const size_t first = d.fraction.find_first_not_of('0');
    if (d.whole != 0 || d.fraction.size() - first > 18) return std::nullopt;
    return Ratio{std::stoull(d.fraction.substr(first)), n};
  }
  const uint64_t scale = Pow10(n);
  if (d.whole > (Pow10(18) - 1) / scale) return std::nullopt;
  uint64_t fraction = 0;
  for (char c : d.fraction) fraction = fraction * 10 + (c - '0');
  return Ratio{d.whole * scale + fraction, n};
}

// The least integer that is a multiple of p / 10^n: p / gcd(p, 10^n).
uint64_t IntegerStep(Ratio r) {
  for (int i = 0; i < r.n && r.p % 2 == 0; ++i) r.p /= 2;
  for (int i = 0; i < r.n && r.p % 5 == 0; ++i) r.p /= 5;
  return r.p;
}

// Floor and ceiling of a / b, b > 0.
__int128 FloorDiv(__int128 a, __int128 b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
__int128 CeilDiv(__int128 a, __int128 b) { return -FloorDiv(-a, b); }

// Non-negative integers in [a, b] (no b: unbounded) that are multiples of k, where k divides
// 10^j: their last j digits decide. Below 10^j, the values themselves.
std::vector<std::string> NonNegativeMultiples(uint64_t a, std::optional<uint64_t> b, uint64_t k,
                                              int j) {
  const uint64_t base = Pow10(j);
  const auto suffixes = [&](uint64_t from, uint64_t to) {
    std::vector<std::string> alts;
    for (uint64_t v = (from + k - 1) / k * k; v <= to; v += k) {
      const std::string t = std::to_string(v);
      alts.push_back(std::string(j - t.size(), '0') + t);
    }
    return alts.empty() ? std::string() : Group(absl::StrJoin(alts, "|"));
  };
  std::vector<std::string> alts;
  const uint64_t small_to = b ? std::min(*b, base - 1) : base - 1;
  for (uint64_t v = (a + k - 1) / k * k; v <= small_to; v += k) alts.push_back(std::to_string(v));
  if (b && *b < base) return alts;
  const auto add = [&](const std::string& head, const std::string& tail) {
    if (!tail.empty()) alts.push_back(head + tail);
  };
  const uint64_t ya = a / base;
  const std::optional<uint64_t> yb = b ? std::optional<uint64_t>(*b / base) : std::nullopt;
  if (ya >= 1) add(std::to_string(ya), suffixes(a % base, yb && *yb == ya ? *b % base : base - 1));
  const uint64_t middle = std::max<uint64_t>(ya + 1, 1);
  if (!yb) {
    add(UIntRangeRegex(middle, std::nullopt), suffixes(0, base - 1));
  } else {
    if (middle + 1 <= *yb) add(UIntRangeRegex(middle, *yb - 1), suffixes(0, base - 1));
    if (*yb > ya) add(std::to_string(*yb), suffixes(0, *b % base));
  }
  return alts;
}

// Integers in [lo, hi] that are multiples of k: by their last digits where k divides a power
// of 10 (within kMaxSuffixes endings), else listed (both bounds, kMaxListedMultiples at most);
// nullopt when neither serves.
std::optional<std::string> IntegerMultiples(std::optional<int64_t> lo, std::optional<int64_t> hi,
                                            uint64_t k) {
  if (lo && hi && *hi < *lo) return "";
  if (k == 1) return IntegerRangeRegex(lo, hi);
  int j = 0;
  while (j <= 18 && Pow10(j) % k != 0) ++j;
  std::vector<std::string> alts;
  if (j <= 18 && Pow10(j) / k <= kMaxSuffixes) {
    if (!lo || *lo < 0) {  // -v for v in [max(1, -hi), -lo]
      const uint64_t from = hi && *hi < 0 ? static_cast<uint64_t>(-*hi) : 1;
      std::optional<uint64_t> to;
      if (lo) to = static_cast<uint64_t>(-*lo);
      for (const std::string& a : NonNegativeMultiples(from, to, k, j)) alts.push_back("-" + a);
    }
    if (!hi || *hi >= 0) {
      std::optional<uint64_t> to;
      if (hi) to = static_cast<uint64_t>(*hi);
      const uint64_t from = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
      for (const std::string& a : NonNegativeMultiples(from, to, k, j)) alts.push_back(a);
    }
  } else if (lo && hi) {
    const __int128 first = CeilDiv(*lo, k), last = FloorDiv(*hi, k);
    if (last - first + 1 > static_cast<__int128>(kMaxListedMultiples)) return std::nullopt;
    for (__int128 i = first; i <= last; ++i) {
      alts.push_back(std::to_string(static_cast<int64_t>(i * static_cast<__int128>(k))));
    }
  } else {
    return std::nullopt;
  }
  return alts.empty() ? "" : Group(absl::StrJoin(alts, "|"));
}

// Multiples of `step` within both bounds, listed (kMaxListedMultiples at most; nullopt past
// that, or past 18 places), each with any trailing zeros.
std::optional<std::string> ListedMultiples(const NumberBound& lo, const NumberBound& hi,
                                           Ratio step) {
  const int places = std::max<int>({step.n, static_cast<int>(lo.value.fraction.size()),
                                    static_cast<int>(hi.value.fraction.size())});
  if (places > 18) return std::nullopt;
  const __int128 scale = Pow10(places);
  const auto scaled = [&](const Decimal& d) {
    std::string digits = d.fraction;
    digits.resize(places, '0');
    __int128 v = static_cast<__int128>(d.whole) * scale;
    for (size_t i = 0; i < digits.size(); ++i)
      v += (digits[i] - '0') * static_cast<__int128>(Pow10(places - 1 - i));
    return d.negative ? -v : v;
  };
  const __int128 unit = static_cast<__int128>(step.p) * Pow10(places - step.n);
  const __int128 low = scaled(lo.value), high = scaled(hi.value);
  __int128 first = CeilDiv(low, unit), last = FloorDiv(high, unit);
  if (lo.exclusive && first * unit == low) ++first;
  if (hi.exclusive && last * unit == high) --last;
  if (last - first + 1 > static_cast<__int128>(kMaxListedMultiples)) return std::nullopt;
  std::vector<std::string> alts;
  for (__int128 i = first; i <= last; ++i) {
    const __int128 v = i * unit, magnitude = v < 0 ? -v : v;
    std::string fraction = std::to_string(static_cast<uint64_t>(magnitude % scale));
    fraction = std::string(places - fraction.size(), '0') + fraction;
    while (!fraction.empty() && fraction.back() == '0') fraction.pop_back();
    alts.push_back(absl::StrCat(v < 0 ? "-" : "", static_cast<uint64_t>(magnitude / scale),
                                fraction.empty() ? "(\\.0+)?" : "\\." + fraction + "0*"));
  }
  return alts.empty() ? "" : Group(absl::StrJoin(alts, "|"));
}

}  // namespace

absl::StatusOr<Decimal> ParseDecimal(std::string_view text) {
  Decimal d;
  std::string_view s = text;
  if (!s.empty() && s[0] == '-') {
    d.negative = true;
    s.remove_prefix(1);
  }
  const size_t point = s.find('.');
  const std::string_view whole = s.substr(0, point);
  std::string_view fraction = point == std::string_view::npos ? "" : s.substr(point + 1);
  const auto digits = [](std::string_view v) {
    return v.find_first_not_of("0123456789") == std::string_view::npos;
  };
  if (whole.empty() || !digits(whole) || !digits(fraction) ||
      (point != std::string_view::npos && fraction.empty()) ||
      std::from_chars(whole.data(), whole.data() + whole.size(), d.whole).ec != std::errc()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", std::string(text), "' is not a plain decimal"));
  }
  while (!fraction.empty() && fraction.back() == '0') fraction.remove_suffix(1);
  if (fraction.size() > kMaxBoundFractionDigits) {
    return absl::InvalidArgumentError(absl::StrCat("'", std::string(text), "' has more than ",
                                                   kMaxBoundFractionDigits,
                                                   " digits after the point"));
  }
  d.fraction = std::string(fraction);
  if (d.whole == 0 && d.fraction.empty()) d.negative = false;
  return d;
}

absl::StatusOr<Decimal> DecimalOf(double value) {
  if (!std::isfinite(value) || std::abs(value) > 1e18) {
    return absl::InvalidArgumentError("a finite value within +-10^18");
  }
  char buf[512];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::fixed);
  if (ec != std::errc()) return absl::InvalidArgumentError("a value that prints as a decimal");
  return ParseDecimal(std::string_view(buf, end - buf));
}

int Compare(const Decimal& a, const Decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  int magnitude = a.whole < b.whole ? -1 : a.whole > b.whole ? 1 : 0;
  // Without trailing zeros, the digit strings compare as the fractions do.
  if (magnitude == 0) magnitude = a.fraction < b.fraction ? -1 : a.fraction > b.fraction ? 1 : 0;
  return a.negative ? -magnitude : magnitude;
}

Decimal Negate(Decimal d) {
  if (!IsZero(d)) d.negative = !d.negative;
  return d;
}

bool IsZero(const Decimal& d) { return d.whole == 0 && d.fraction.empty(); }

int64_t Floor(const Decimal& d) {
  const int64_t w = static_cast<int64_t>(d.whole);
  if (!d.negative) return w;
  return d.fraction.empty() ? -w : -w - 1;
}

int64_t Ceil(const Decimal& d) { return -Floor(Negate(d)); }

std::string AnyNumberRegex() { return absl::StrCat("-?(0|[1-9][0-9]*)", kNumberTail); }

std::string UIntRangeRegex(uint64_t lo, std::optional<uint64_t> hi) {
  const std::string a = std::to_string(lo);
  const size_t last = hi ? std::to_string(*hi).size() : a.size();
  std::vector<std::string> alts;
  for (size_t len = a.size(); len <= last; ++len) {
    const std::string low = len == a.size() ? a : "1" + std::string(len - 1, '0');
    const std::string high = hi && len == last ? std::to_string(*hi) : std::string(len, '9');
    alts.push_back(SameLength(low, high));
  }
  if (!hi) alts.push_back(absl::StrCat("[1-9][0-9]{", a.size(), ",}"));
  return Group(absl::StrJoin(alts, "|"));
}

std::string IntegerRangeRegex(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  if (lo && hi && *hi < *lo) return "";
  std::vector<std::string> alts;
  // Negative values: -v for v in [max(1, -hi), -lo].
  if (!lo || *lo < 0) {
    const uint64_t from = hi && *hi < 0 ? static_cast<uint64_t>(-*hi) : 1;
    std::optional<uint64_t> to;
    if (lo) to = static_cast<uint64_t>(-*lo);
    alts.push_back("-" + UIntRangeRegex(from, to));
  }
  if (!hi || *hi >= 0) {
    const uint64_t from = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    std::optional<uint64_t> to;
    if (hi) to = static_cast<uint64_t>(*hi);
    alts.push_back(UIntRangeRegex(from, to));
  }
  return Group(absl::StrJoin(alts, "|"));
}

std::string NumberRangeRegex(const std::optional<NumberBound>& lo,
                             const std::optional<NumberBound>& hi) {
  if (!lo && !hi) return AnyNumberRegex();
  return DecimalRange(lo, hi, PlacesFractions(-1), /*exponent=*/true);
}

std::pair<std::optional<int64_t>, std::optional<int64_t>> IntegerBounds(
    const std::optional<NumberBound>& lo, const std::optional<NumberBound>& hi) {
  std::optional<int64_t> from, to;
  if (lo) from = Ceil(lo->value) + (lo->exclusive && lo->value.fraction.empty() ? 1 : 0);
  if (hi) to = Floor(hi->value) - (hi->exclusive && hi->value.fraction.empty() ? 1 : 0);
  return {from, to};
}

absl::StatusOr<std::string> MultiplesRegex(const std::optional<NumberBound>& lo,
                                           const std::optional<NumberBound>& hi,
                                           const Decimal& step, bool integer) {
  const std::optional<Ratio> ratio = RatioOf(step);
  if (!ratio || (!integer && ratio->n > 18)) {
    return absl::InvalidArgumentError(
        "a step above 0 with at most 18 significant digits and 18 places");
  }
  const auto [from, to] = IntegerBounds(lo, hi);
  std::optional<std::string> r;
  const uint64_t power = integer ? 0 : Pow10(ratio->n);
  if (integer) {
    r = IntegerMultiples(from, to, IntegerStep(*ratio));
  } else if (ratio->p == 1) {  // 1, 0.1, 0.01, ...: at most n places
    r = DecimalRange(lo, hi, PlacesFractions(ratio->n), /*exponent=*/false);
  } else if (ratio->n == 0) {  // an integer step: integers, maybe with a zero fraction
    r = IntegerMultiples(from, to, ratio->p);
    if (r && !r->empty()) *r = Group(*r) + "(\\.0+)?";
  } else if (power % ratio->p == 0 && power / ratio->p <= kMaxSuffixes) {  // 0.5, 0.25, 0.05
    std::vector<std::string> list;
    for (uint64_t v = 0; v < power; v += ratio->p) {
      std::string digits = std::to_string(v);
      digits = std::string(ratio->n - digits.size(), '0') + digits;
      while (!digits.empty() && digits.back() == '0') digits.pop_back();
      list.push_back(digits);
    }
    r = DecimalRange(lo, hi, ListedFractions(std::move(list)), /*exponent=*/false);
  }
  if (!r && !integer && lo && hi) r = ListedMultiples(*lo, *hi, *ratio);
  if (r) return *r;
  return absl::InvalidArgumentError(absl::StrCat(
      "served for any bounds with 1, 0.1, 0.01, ...; 1/2, 1/4, 0.05 and other fractions 1/q of a "
      "power of ten; integers dividing a power of ten; any other step needs both bounds, with at "
      "most ",
      kMaxListedMultiples, " multiples between them"));
}

}  // namespace llm::constraint
