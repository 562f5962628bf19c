#include "worker/frontend/chat/jinja_arithmetic.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "worker/frontend/chat/jinja_text_filters.h"

namespace llm::frontend::jinja {
namespace {

using K = Value::Kind;

absl::StatusOr<Value> Overflow() {
  return absl::InvalidArgumentError("integer overflow: the result does not fit in 64 bits");
}

absl::Status Unsupported(const std::string& op, const Value& a, const Value& b) {
  return absl::InvalidArgumentError(absl::StrCat("unsupported operand type(s) for ", op, ": '",
                                                 TypeName(a), "' and '", TypeName(b), "'"));
}

// The operands as Python sees them: both ints (bools count), both numbers, and their int values.
struct Operands {
  bool ints, nums;
  int64_t ai, bi;
  Operands(const Value& a, const Value& b)
      : ints((a.kind == K::kInt || a.kind == K::kBool) &&
             (b.kind == K::kInt || b.kind == K::kBool)),
        nums((a.is_number() || a.kind == K::kBool) && (b.is_number() || b.kind == K::kBool)),
        ai(a.kind == K::kBool ? a.b : a.i),
        bi(b.kind == K::kBool ? b.b : b.i) {}
};

// Values built by joining are bounded like the output: doubling a string or a list 40 times in
// a loop took gigabytes before the output bound was ever reached.
absl::Status StringTooLong(int line, size_t max_bytes) {
  return absl::ResourceExhaustedError(
      absl::StrCat("chat template line ", line, ": a string exceeds ", max_bytes, " bytes"));
}

absl::StatusOr<Value> Add(const Value& a, const Value& b, int line, size_t max_bytes) {
  const Operands o(a, b);
  int64_t r = 0;
  if (o.ints) return __builtin_add_overflow(o.ai, o.bi, &r) ? Overflow() : Value::Int(r);
  if (o.nums) return Value::Float(a.number() + b.number());
  if (a.is_string() && b.is_string() && (a.markup || b.markup)) {
    // Markup + str escapes the str (either way round), and stays Markup.
    std::string l = a.markup ? a.s : HtmlEscape(a.s), rs = b.markup ? b.s : HtmlEscape(b.s);
    if (l.size() + rs.size() > max_bytes) return StringTooLong(line, max_bytes);
    return Value::Markup(std::move(l) + rs);
  }
  if (a.is_string() && b.is_string()) {
    if (a.s.size() + b.s.size() > max_bytes) return StringTooLong(line, max_bytes);
    return Value::Str(a.s + b.s);
  }
  if (a.kind == K::kList && b.kind == K::kList) {
    if (a.list->size() + b.list->size() > max_bytes / 16) {
      return absl::ResourceExhaustedError(
          absl::StrCat("chat template line ", line, ": a list exceeds ", max_bytes / 16, " items"));
    }
    List l = *a.list;
    l.insert(l.end(), b.list->begin(), b.list->end());
    return Value::MakeList(std::move(l));
  }
  return Unsupported("+", a, b);
}

absl::StatusOr<Value> Multiply(const Value& a, const Value& b, size_t max_bytes) {
  const Operands o(a, b);
  int64_t r = 0;
  if (o.ints) return __builtin_mul_overflow(o.ai, o.bi, &r) ? Overflow() : Value::Int(r);
  if (o.nums) return Value::Float(a.number() * b.number());
  const Value* seq = a.kind == K::kInt ? &b : &a;
  const Value* count = a.kind == K::kInt ? &a : &b;
  if (count->kind != K::kInt || !(seq->is_string() || seq->kind == K::kList)) {
    return Unsupported("*", a, b);
  }
  const auto size = static_cast<int64_t>(seq->is_string() ? seq->s.size() : seq->list->size());
  int64_t total = 0;  // the product could wrap past the bound ([1] * 2**62)
  if (count->i > 0 &&
      (__builtin_mul_overflow(count->i, size, &total) || total > static_cast<int64_t>(max_bytes))) {
    return absl::ResourceExhaustedError("chat template: a repetition is too large");
  }
  if (seq->is_string()) {
    std::string s;
    for (int64_t i = 0; i < count->i; ++i) s += seq->s;
    return Value::Str(std::move(s));
  }
  List l;
  for (int64_t i = 0; i < count->i; ++i) l.insert(l.end(), seq->list->begin(), seq->list->end());
  return Value::MakeList(std::move(l));
}

// / // and % of numbers: Python's floor division and modulo (the sign of the divisor).
absl::StatusOr<Value> Divide(const std::string& op, const Value& a, const Value& b) {
  const Operands o(a, b);
  if (b.number() == 0) return absl::InvalidArgumentError("division by zero");
  if (op == "/") return Value::Float(a.number() / b.number());
  if (o.ints && o.ai == std::numeric_limits<int64_t>::min() && o.bi == -1) {
    return op == "%" ? absl::StatusOr<Value>(Value::Int(0)) : Overflow();  // the quotient is 2^63
  }
  if (o.ints) {
    int64_t q = o.ai / o.bi, r = o.ai % o.bi;
    if (r != 0 && ((r < 0) != (o.bi < 0))) {
      --q;
      r += o.bi;
    }
    return Value::Int(op == "//" ? q : r);
  }
  const double q = std::floor(a.number() / b.number());
  return Value::Float(op == "//" ? q : a.number() - q * b.number());
}

absl::StatusOr<Value> Power(const Value& a, const Value& b) {
  const Operands o(a, b);
  if (o.ints && o.bi >= 0) {
    if (o.ai >= -1 && o.ai <= 1) {
      return Value::Int(o.bi == 0 ? 1 : o.ai == -1 && o.bi % 2 == 0 ? 1 : o.ai);
    }
    int64_t r = 1;  // |ai| >= 2: past 64 bits within 63 factors
    for (int64_t i = 0; i < o.bi; ++i) {
      if (__builtin_mul_overflow(r, o.ai, &r)) return Overflow();
    }
    return Value::Int(r);
  }
  return Value::Float(std::pow(a.number(), b.number()));
}

}  // namespace

absl::StatusOr<Value> Arithmetic(const std::string& op, const Value& a, const Value& b, int line,
                                 size_t max_bytes) {
  for (const Value* x : {&a, &b}) {
    if (x->undefined()) {
      return absl::InvalidArgumentError(x->s.empty() ? "an operand is undefined" : x->s);
    }
  }
  const bool nums = Operands(a, b).nums;
  if (op == "+") return Add(a, b, line, max_bytes);
  if (op == "*") return Multiply(a, b, max_bytes);
  if (op == "-" && nums) {
    const Operands o(a, b);
    int64_t r = 0;
    if (o.ints) return __builtin_sub_overflow(o.ai, o.bi, &r) ? Overflow() : Value::Int(r);
    return Value::Float(a.number() - b.number());
  }
  if ((op == "/" || op == "//" || op == "%") && nums) return Divide(op, a, b);
  if (op == "**" && nums) return Power(a, b);
  return Unsupported(op, a, b);
}

}  // namespace llm::frontend::jinja
