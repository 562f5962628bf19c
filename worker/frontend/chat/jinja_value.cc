#include "worker/frontend/chat/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"
#include "worker/frontend/chat/python_str.h"

namespace llm::frontend::jinja {

std::optional<Value> Args::Take(size_t index, const std::string& name) {
  for (auto it = kw.begin(); it != kw.end(); ++it) {
    if (it->first == name) {
      Value v = std::move(it->second);
      kw.erase(it);
      return v;
    }
  }
  if (index < pos.size()) return pos[index];
  return std::nullopt;
}

const Value* Find(const Dict& d, const std::string& key) {
  for (const auto& [k, v] : d) {
    if (k == key) return &v;
  }
  return nullptr;
}

absl::Status TooLong(const std::string& what) {
  return absl::ResourceExhaustedError(
      absl::StrCat("chat template: ", what, " would exceed ", kMaxBuiltBytes, " bytes"));
}

bool ReplaceFits(const std::string& s, const std::string& old, const std::string& with) {
  if (with.size() <= old.size()) return true;
  size_t n = 0;
  if (old.empty()) {
    n = CodePoints(s).size() + 1;
  } else {
    for (size_t at = s.find(old); at != std::string::npos; at = s.find(old, at + old.size())) ++n;
  }
  return s.size() + n * (with.size() - old.size()) <= kMaxBuiltBytes;
}

absl::Status UndefinedError(const Value& v) {
  return absl::InvalidArgumentError(v.s.empty() ? "a value is undefined" : v.s);
}

absl::Status IntOverflowError(const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("integer overflow in ", what, ": the result does not fit in 64 bits"));
}

std::optional<int64_t> AsInt(const Value& v) {
  if (v.kind == Value::Kind::kInt) return v.i;
  if (v.kind == Value::Kind::kBool) return v.b ? 1 : 0;
  return std::nullopt;
}

Value FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::None();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      // Past int64 (Python keeps the exact integer; this engine has no big integers): the
      // nearest float, never a wrapped negative.
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Value::Float(static_cast<double>(u));
      }
      return Value::Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::Str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& x : j) l.push_back(FromJson(x));
      return Value::MakeList(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      d.reserve(j.size());
      for (const auto& [k, x] : j.items()) d.emplace_back(k, FromJson(x));
      return Value::MakeDict(std::move(d));
    }
    default:
      return Value::None();
  }
}

bool Truthy(const Value& v) {
  using K = Value::Kind;
  switch (v.kind) {
    case K::kUndefined:
    case K::kNone:
      return false;
    case K::kBool:
      return v.b;
    case K::kInt:
      return v.i != 0;
    case K::kFloat:
      return v.f != 0;
    case K::kString:
      return !v.s.empty();
    case K::kList:
      return !v.list->empty();
    case K::kDict:
      return !v.dict->empty();
    default:
      return true;
  }
}

namespace {

bool Numeric(const Value& v) {
  return v.kind == Value::Kind::kInt || v.kind == Value::Kind::kFloat ||
         v.kind == Value::Kind::kBool;
}

}  // namespace

bool Equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (Numeric(a) && Numeric(b)) {
    if (a.kind != K::kFloat && b.kind != K::kFloat) {
      return (a.kind == K::kBool ? a.b : a.i) == (b.kind == K::kBool ? b.b : b.i);
    }
    return a.number() == b.number();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.s == b.s;
    case K::kList:
      if (a.tuple != b.tuple || a.list->size() != b.list->size()) return false;
      for (size_t i = 0; i < a.list->size(); ++i) {
        if (!Equal((*a.list)[i], (*b.list)[i])) return false;
      }
      return true;
    case K::kDict:
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, v] : *a.dict) {
        const Value* o = Find(*b.dict, k);
        if (o == nullptr || !Equal(v, *o)) return false;
      }
      return true;
    case K::kNamespace:
      return a.ns == b.ns;
    case K::kFunction:
      return a.fn == b.fn;
    default:
      return false;
  }
}

absl::StatusOr<int> Compare(const Value& a, const Value& b) {
  if (Numeric(a) && Numeric(b)) {
    const double x = a.number(), y = b.number();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.s.compare(b.s);
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.kind == Value::Kind::kList && b.kind == Value::Kind::kList) {
    for (size_t i = 0; i < a.list->size() && i < b.list->size(); ++i) {
      auto c = Compare((*a.list)[i], (*b.list)[i]);
      if (!c.ok() || *c != 0) return c;
    }
    const size_t n = a.list->size(), m = b.list->size();
    return n < m ? -1 : (n > m ? 1 : 0);
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 TypeName(a), "' and '", TypeName(b), "'"));
}

std::string FloatRepr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  char buf[64];
  int p = 1;
  for (; p <= 17; ++p) {
    std::snprintf(buf, sizeof(buf), "%.*e", p - 1, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  // buf: [-]d.ddde[+-]XX
  std::string s(buf);
  const bool neg = s[0] == '-';
  if (neg) s.erase(0, 1);
  const size_t e = s.find('e');
  std::string digits = s.substr(0, 1) + (e > 2 ? s.substr(2, e - 2) : "");
  const int exp = std::atoi(s.c_str() + e + 1);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      std::string ip = digits.substr(0, std::min<size_t>(digits.size(), exp + 1));
      while (static_cast<int>(ip.size()) < exp + 1) ip += '0';
      std::string fp = static_cast<int>(digits.size()) > exp + 1 ? digits.substr(exp + 1) : "";
      out = ip + "." + (fp.empty() ? "0" : fp);
    } else {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  return neg ? "-" + out : out;
}

std::string TypeName(const Value& v) {
  using K = Value::Kind;
  switch (v.kind) {
    case K::kUndefined:
      return "Undefined";
    case K::kNone:
      return "NoneType";
    case K::kBool:
      return "bool";
    case K::kInt:
      return "int";
    case K::kFloat:
      return "float";
    case K::kString:
      return "str";
    case K::kList:
      return v.tuple ? "tuple" : "list";
    case K::kDict:
      return "dict";
    case K::kNamespace:
      return "Namespace";
    default:
      return "function";
  }
}

std::vector<std::string> CodePoints(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    n = std::min(n, s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

namespace {

// Python's repr() of a str: quoted, backslash escapes for what is not printable (\xhh below
// U+0100, \uhhhh below U+10000, else \Uhhhhhhhh), so that a list or dict printed by a
// template shows U+00A0 or U+200B as jinja2 shows them.
std::string ReprString(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = Utf8SequenceLength(c);
    if (c >= 0x80 &&
        (n == 0 || i + n > s.size() || !IsValidUtf8(std::string_view(s).substr(i, n)))) {
      out += s[i++];  // not UTF-8 (never from a request: those are checked); kept as it is
      continue;
    }
    const size_t start = i;
    const char32_t cp = DecodeUtf8(s, i);
    char b[16];
    if (cp == '\\') {
      out += "\\\\";
    } else if (cp == static_cast<char32_t>(q)) {
      out += '\\';
      out += q;
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (IsPrintable(cp)) {
      out.append(s, start, i - start);
    } else {
      std::snprintf(b, sizeof(b),
                    cp < 0x100     ? "\\x%02x"
                    : cp < 0x10000 ? "\\u%04x"
                                   : "\\U%08x",
                    static_cast<unsigned>(cp));
      out += b;
    }
  }
  out += q;
  return out;
}

void AppendJsonEscape(uint32_t cp, std::string* out) {
  char b[8];
  std::snprintf(b, sizeof(b), "\\u%04x", cp);
  *out += b;
}

void JsonString(const std::string& s, bool ensure_ascii, std::string* out) {
  *out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
          AppendJsonEscape(c, out);
        } else if (ensure_ascii && c >= 0x80) {
          // A UTF-8 sequence: \uXXXX, as a surrogate pair above the BMP.
          const size_t n = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
          uint32_t cp = n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : n == 4 ? (c & 0x07) : c;
          for (size_t k = 1; k < n && i + k < s.size(); ++k) {
            cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
          }
          i += n - 1;
          if (cp >= 0x10000) {
            cp -= 0x10000;
            AppendJsonEscape(0xd800 + (cp >> 10), out);
            AppendJsonEscape(0xdc00 + (cp & 0x3ff), out);
          } else {
            AppendJsonEscape(cp, out);
          }
        } else {
          *out += ch;
        }
    }
  }
  *out += '"';
}

absl::Status Json(const Value& v, const JsonOptions& o, int depth, std::string* out) {
  using K = Value::Kind;
  const std::string item_sep = o.separators ? o.separators->first : o.indent ? "," : ", ";
  const std::string key_sep = o.separators ? o.separators->second : ": ";
  const auto newline = [&](int d) {
    *out += '\n';
    for (int i = 0; i < d; ++i) *out += *o.indent;
  };
  switch (v.kind) {
    case K::kNone:
      *out += "null";
      return absl::OkStatus();
    case K::kBool:
      *out += v.b ? "true" : "false";
      return absl::OkStatus();
    case K::kInt:
      *out += std::to_string(v.i);
      return absl::OkStatus();
    case K::kFloat:
      if (std::isnan(v.f)) {
        *out += "NaN";
      } else if (std::isinf(v.f)) {
        *out += v.f > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += FloatRepr(v.f);
      }
      return absl::OkStatus();
    case K::kString:
      JsonString(v.s, o.ensure_ascii, out);
      return absl::OkStatus();
    case K::kList: {
      if (v.list->empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      *out += '[';
      bool first = true;
      for (const Value& x : *v.list) {
        if (!first) *out += item_sep;
        first = false;
        if (o.indent) newline(depth + 1);
        if (absl::Status st = Json(x, o, depth + 1, out); !st.ok()) return st;
      }
      if (o.indent) newline(depth);
      *out += ']';
      return absl::OkStatus();
    }
    case K::kDict: {
      if (v.dict->empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : *v.dict) items.push_back(&item);
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      *out += '{';
      bool first = true;
      for (const auto* item : items) {
        if (!first) *out += item_sep;
        first = false;
        if (o.indent) newline(depth + 1);
        JsonString(item->first, o.ensure_ascii, out);
        *out += key_sep;
        if (absl::Status st = Json(item->second, o, depth + 1, out); !st.ok()) return st;
      }
      if (o.indent) newline(depth);
      *out += '}';
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("Object of type ", TypeName(v), " is not JSON serializable"));
  }
}

}  // namespace

namespace {

// The containers being printed on this thread, innermost last: a namespace can hold itself
// ({% set ns.x = [ns] %}), and Python prints the repeat as [...], {...} (printing it recursed
// until the stack overflowed).
thread_local std::vector<const void*> printing;

class Printing {
 public:
  explicit Printing(const void* container)
      : repeat_(std::find(printing.begin(), printing.end(), container) != printing.end()) {
    printing.push_back(container);
  }
  ~Printing() { printing.pop_back(); }
  bool repeat() const { return repeat_; }

 private:
  bool repeat_;
};

}  // namespace

std::string Repr(const Value& v) {
  using K = Value::Kind;
  switch (v.kind) {
    case K::kString:
      return v.markup ? "Markup(" + ReprString(v.s) + ")" : ReprString(v.s);
    case K::kList: {
      const Printing guard(v.list.get());
      if (guard.repeat()) return v.tuple ? "(...)" : "[...]";
      std::string out = v.tuple ? "(" : "[";
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i > 0) out += ", ";
        out += Repr((*v.list)[i]);
      }
      if (v.tuple) return out + (v.list->size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case K::kUndefined:
      return "Undefined";
    case K::kDict: {
      const Printing guard(v.dict.get());
      if (guard.repeat()) return "{...}";
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : *v.dict) {
        if (!first) out += ", ";
        first = false;
        out += ReprString(k) + ": " + Repr(x);
      }
      return out + "}";
    }
    default:
      return ToStr(v);
  }
}

std::string ToStr(const Value& v) {
  using K = Value::Kind;
  switch (v.kind) {
    case K::kUndefined:
      return "";
    case K::kNone:
      return "None";
    case K::kBool:
      return v.b ? "True" : "False";
    case K::kInt:
      return std::to_string(v.i);
    case K::kFloat:
      return FloatRepr(v.f);
    case K::kString:
      return v.s;
    case K::kList:
    case K::kDict:
      return Repr(v);
    case K::kNamespace: {
      const Printing guard(v.ns.get());
      if (guard.repeat()) return "<Namespace {...}>";
      Value attrs = Value::MakeDict(v.ns->attrs);
      return "<Namespace " + Repr(attrs) + ">";
    }
    default:
      return "<function>";
  }
}

absl::StatusOr<std::string> ToJson(const Value& v, const JsonOptions& options) {
  std::string out;
  if (absl::Status st = Json(v, options, 0, &out); !st.ok()) return st;
  return out;
}

}  // namespace llm::frontend::jinja
