#include "worker/frontend/chat/jinja_number_filters.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "worker/frontend/chat/python_str.h"

namespace llm::frontend::jinja {
namespace {

using K = Value::Kind;

absl::Status Error(const std::string& what) { return absl::InvalidArgumentError(what); }

// int(x) of a finite float: toward zero.
absl::StatusOr<Value> FloatToInt(double x) {
  if (!(x >= -0x1p63 && x < 0x1p63)) {
    return IntOverflowError("int");
  }
  return Value::Int(static_cast<int64_t>(std::trunc(x)));
}

// int(text, base) else int(float(text)) of a string, else `fallback`.
absl::StatusOr<Value> StringToInt(const std::string& s, const std::optional<Value>& base,
                                  const Value& fallback) {
  const std::optional<std::string> text = NumericText(s);
  if (!text) return fallback;
  // A base that is not an int is Python's TypeError: the same fallback as a bad literal.
  if (const std::optional<int64_t> b = base ? AsInt(*base) : 10) {
    absl::StatusOr<int64_t> i = ParseInt(*text, *b);
    if (i.ok()) return Value::Int(*i);
    if (absl::IsOutOfRange(i.status())) return IntOverflowError("int");
  }
  const std::optional<double> f = ParseFloat(*text);
  if (!f || !std::isfinite(*f)) return fallback;
  return FloatToInt(*f);
}

// jinja2's int(value, default=0, base=10): int(value) (a string read in `base`), else
// int(float(value)), else the default; an error for undefined values and for infinity (whose
// OverflowError jinja2 lets through).
absl::StatusOr<Value> IntFilter(const Value& v, Args& args) {
  auto def = args.Take(0, "default");
  auto base = args.Take(1, "base");
  const Value fallback = def ? *def : Value::Int(0);
  switch (v.kind) {
    case K::kUndefined:
      return UndefinedError(v);
    case K::kInt:
      return v;
    case K::kBool:
      return Value::Int(v.b);
    case K::kFloat:
      if (std::isnan(v.f)) return fallback;
      if (std::isinf(v.f)) return Error("cannot convert float infinity to integer");
      return FloatToInt(v.f);
    case K::kString:
      return StringToInt(v.s, base, fallback);
    default:
      return fallback;
  }
}

// jinja2's float(value, default=0.0).
absl::StatusOr<Value> FloatFilter(const Value& v, Args& args) {
  auto def = args.Take(0, "default");
  if (v.undefined()) return UndefinedError(v);
  if (v.is_number() || v.kind == K::kBool) return Value::Float(v.number());
  if (v.is_string()) {
    if (const std::optional<std::string> text = NumericText(v.s)) {
      if (const std::optional<double> f = ParseFloat(*text)) return Value::Float(*f);
    }
  }
  return def ? *def : Value::Float(0);
}

absl::StatusOr<Value> AbsFilter(const Value& v) {
  if (v.kind == K::kInt || v.kind == K::kBool) {
    const int64_t i = *AsInt(v);
    if (i == INT64_MIN) return IntOverflowError("abs");
    return Value::Int(i < 0 ? -i : i);
  }
  return Value::Float(std::fabs(v.number()));
}

// Python's round(i, p) of an int: i itself for p >= 0; else to a multiple of 10^-p, ties to the
// even multiple.
absl::StatusOr<Value> RoundInt(int64_t i, int64_t p) {
  if (p >= 0) return Value::Int(i);
  if (p < -18) return Value::Int(0);
  int64_t m = 1;
  for (int64_t k = 0; k < -p; ++k) m *= 10;
  int64_t q = i / m, r = i % m;
  if (r < 0) {
    --q;
    r += m;
  }
  if (2 * r > m || (2 * r == m && q % 2 != 0)) ++q;
  int64_t rounded = 0;
  if (__builtin_mul_overflow(q, m, &rounded)) return IntOverflowError("round");
  return Value::Int(rounded);
}

// Python's round(x, p) of a float: half to even on the exact binary value, which printf's
// correctly rounded "%.*f" gives for the precisions it prints.
Value RoundFloat(double x, int64_t p) {
  if (p >= 0 && p < 300) {
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(p), x);
    return Value::Float(std::strtod(buf, nullptr));
  }
  const double m = std::pow(10.0, static_cast<double>(p));
  return Value::Float(std::nearbyint(x * m) / m);
}

// jinja2's round(value, precision=0, method='common'): 'common' is Python's round() (half to
// even, on the exact binary value); 'ceil' and 'floor' give floats.
absl::StatusOr<Value> RoundFilter(const Value& v, Args& args) {
  auto precision = args.Take(0, "precision");
  auto method = args.Take(1, "method");
  const int64_t p = precision ? precision->i : 0;
  const std::string how = method ? ToStr(*method) : "common";
  if (how != "common" && how != "ceil" && how != "floor") {
    return Error("method must be 'common', 'ceil' or 'floor'");
  }
  if (!(v.is_number() || v.kind == K::kBool)) {
    return Error(absl::StrCat("type ", TypeName(v), " doesn't define __round__ method"));
  }
  if (how == "common") {
    if (v.kind != K::kFloat) return RoundInt(v.kind == K::kBool ? v.b : v.i, p);
    return RoundFloat(v.number(), p);
  }
  const double m = std::pow(10.0, static_cast<double>(p));
  const double x = v.number() * m;
  return Value::Float((how == "ceil" ? std::ceil(x) : std::floor(x)) / m);
}

}  // namespace

std::optional<absl::StatusOr<Value>> NumberFilter(const std::string& n, const Value& v,
                                                  Args& args) {
  if (n == "int") return IntFilter(v, args);
  if (n == "float") return FloatFilter(v, args);
  if (n != "abs" && n != "round") return std::nullopt;
  if (v.undefined()) return UndefinedError(v);
  if (n == "abs") return AbsFilter(v);
  return RoundFilter(v, args);
}

}  // namespace llm::frontend::jinja
