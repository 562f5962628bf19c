#include "worker/frontend/chat/jinja_format.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace llm::frontend::jinja {

namespace {

using K = Value::Kind;

absl::Status Error(const std::string& what) { return absl::InvalidArgumentError(what); }

size_t NumCodePoints(const std::string& s) {
  size_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  return n;
}

// `s` padded to `width` code points: align '<' (left), '>' (right), '^' (centre) or '='
// (after the sign: numbers with '0').
std::string Pad(const std::string& s, size_t width, char align, char fill) {
  const size_t n = NumCodePoints(s);
  if (n >= width) return s;
  const size_t pad = width - n;
  if (align == '<') return s + std::string(pad, fill);
  if (align == '^') return std::string(pad / 2, fill) + s + std::string(pad - pad / 2, fill);
  if (align == '=' && !s.empty() && (s[0] == '-' || s[0] == '+' || s[0] == ' ')) {
    return s.substr(0, 1) + std::string(pad, fill) + s.substr(1);
  }
  return std::string(pad, fill) + s;
}

// A number in C printf's notation (`conv` one of d x X o f F e E g G), with `flags` from
// "+ #" and a precision (-1: none).
absl::StatusOr<std::string> Number(const Value& v, char conv, const std::string& flags,
                                   int precision) {
  if (!(v.is_number() || v.kind == K::kBool)) {
    return Error(absl::StrCat("a number is required, not ", TypeName(v)));
  }
  std::string f = "%" + flags;
  if (precision >= 0) f += "." + std::to_string(precision);
  char buf[512];
  if (conv == 'd' || conv == 'x' || conv == 'X' || conv == 'o') {
    const long long i = v.kind == K::kFloat
                            ? static_cast<long long>(std::trunc(v.f))
                            : static_cast<long long>(v.kind == K::kBool ? v.b : v.i);
    if (conv != 'd' && i < 0) {
      f += "ll";
      f += conv;
      std::snprintf(buf, sizeof(buf), f.c_str(), -i);
      return "-" + std::string(buf);
    }
    f += "ll";
    f += conv;
    std::snprintf(buf, sizeof(buf), f.c_str(), i);
  } else {
    f += conv;
    std::snprintf(buf, sizeof(buf), f.c_str(), v.number());
  }
  return std::string(buf);
}

// One conversion with its flags, width and precision.
absl::StatusOr<std::string> Convert(const Value& v, char conv, const std::string& flags, int width,
                                    int precision) {
  const bool left = flags.find('-') != std::string::npos;
  const bool zero = flags.find('0') != std::string::npos && !left;
  std::string num_flags;
  for (const char c : flags) {
    if (c == '+' || c == ' ' || c == '#') num_flags += c;
  }
  std::string s;
  if (conv == 's' || conv == 'r') {
    s = conv == 's' ? ToStr(v) : Repr(v);
    if (precision >= 0) {
      const auto cps = CodePoints(s);
      if (cps.size() > static_cast<size_t>(precision)) {
        s.clear();
        for (int i = 0; i < precision; ++i) s += cps[static_cast<size_t>(i)];
      }
    }
  } else if (conv == 'c') {
    s = v.is_string() ? v.s : std::string(1, static_cast<char>(v.i));
  } else {
    auto n = Number(v, conv == 'i' || conv == 'u' ? 'd' : conv, num_flags, precision);
    if (!n.ok()) return n.status();
    s = *std::move(n);
    if (zero && width > 0) return Pad(s, static_cast<size_t>(width), '=', '0');
  }
  if (width > 0) return Pad(s, static_cast<size_t>(width), left ? '<' : '>', ' ');
  return s;
}

}  // namespace

absl::StatusOr<std::string> PercentFormat(const std::string& format, const Value& args) {
  List positional;
  if (args.kind == K::kList && args.tuple) {
    positional = *args.list;
  } else if (args.kind != K::kDict) {
    positional.push_back(args);
  }
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) return Error("incomplete format");
    const Value* value = nullptr;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == std::string::npos) return Error("incomplete format key");
      if (args.kind != K::kDict) return Error("format requires a mapping");
      value = Find(*args.dict, format.substr(i + 1, close - i - 1));
      if (value == nullptr) return Error(format.substr(i, close - i + 1));
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < format.size() && std::string("-+ 0#").find(format[i]) != std::string::npos) {
      flags += format[i++];
    }
    int width = 0, precision = -1;
    while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]))) {
      width = width * 10 + (format[i++] - '0');
      if (width > static_cast<int>(kMaxBuiltBytes)) return TooLong("a format width");
    }
    if (i < format.size() && format[i] == '.') {
      precision = 0;
      ++i;
      while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]))) {
        precision = precision * 10 + (format[i++] - '0');
        if (precision > static_cast<int>(kMaxBuiltBytes)) return TooLong("a format precision");
      }
    }
    if (i >= format.size()) return Error("incomplete format");
    const char conv = format[i];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (std::string("srdiufFeEgGxXoc").find(conv) == std::string::npos) {
      return Error(absl::StrCat("unsupported format character '", std::string(1, conv), "'"));
    }
    if (value == nullptr) {
      if (next >= positional.size()) return Error("not enough arguments for format string");
      value = &positional[next++];
    }
    auto s = Convert(*value, conv, flags, width, precision);
    if (!s.ok()) return s.status();
    out += *s;
  }
  if (!used_mapping && args.kind != K::kDict && next < positional.size()) {
    return Error("not all arguments converted during string formatting");
  }
  return out;
}

namespace {

// A replacement field "{field!conversion:spec}", split.
struct ReplacementField {
  std::string field, conversion, spec;
};

ReplacementField SplitField(const std::string& inner) {
  ReplacementField r;
  const size_t colon = inner.find(':');
  const size_t bang = inner.find('!');
  r.field = inner.substr(0, std::min(colon, bang));
  if (bang < colon) r.conversion = inner.substr(bang + 1, colon - bang - 1);
  if (colon != std::string::npos) r.spec = inner.substr(colon + 1);
  return r;
}

// The argument `field` names: the next positional one ("{}"), the one at an index (its leading
// digits), or a keyword's; null when there is none.
absl::StatusOr<const Value*> FieldArgument(const std::string& field, const Args& args,
                                           size_t& auto_index) {
  if (field.empty()) return auto_index < args.pos.size() ? &args.pos[auto_index++] : nullptr;
  if (std::isdigit(static_cast<unsigned char>(field[0]))) {
    // Python's index: an error only past its largest index (2^63 - 1), leading zeros or not.
    constexpr uint64_t kMaxIndex = std::numeric_limits<int64_t>::max();
    uint64_t k = 0;
    for (size_t i = 0; i < field.size() && std::isdigit(static_cast<unsigned char>(field[i]));
         ++i) {
      const auto digit = static_cast<uint64_t>(field[i] - '0');
      if (k > (kMaxIndex - digit) / 10) return Error("Too many decimal digits in format string");
      k = k * 10 + digit;
    }
    return k < args.pos.size() ? &args.pos[k] : nullptr;
  }
  const Value* v = nullptr;
  for (const auto& [name, x] : args.kw) {
    if (name == field) v = &x;
  }
  return v;
}

// A format spec: [[fill]align][sign][0][width][.precision][type].
struct FormatSpec {
  char fill = ' ', align = 0;
  std::string flags;
  int width = 0, precision = -1;
  char type = 0;
};

// Digits at spec[p...] as an int; RESOURCE_EXHAUSTED naming `what` past kMaxBuiltBytes.
absl::StatusOr<int> SpecNumber(const std::string& spec, size_t& p, const char* what) {
  int n = 0;
  while (p < spec.size() && std::isdigit(static_cast<unsigned char>(spec[p]))) {
    n = n * 10 + (spec[p++] - '0');
    if (n > static_cast<int>(kMaxBuiltBytes)) return TooLong(what);
  }
  return n;
}

absl::StatusOr<FormatSpec> ParseFormatSpec(const std::string& spec) {
  FormatSpec fs;
  size_t p = 0;
  const auto is_align = [](char a) { return a == '<' || a == '>' || a == '^' || a == '='; };
  if (spec.size() >= 2 && is_align(spec[1])) {
    fs.fill = spec[0];
    fs.align = spec[1];
    p = 2;
  } else if (!spec.empty() && is_align(spec[0])) {
    fs.align = spec[0];
    p = 1;
  }
  if (p < spec.size() && (spec[p] == '+' || spec[p] == '-' || spec[p] == ' ')) {
    if (spec[p] != '-') fs.flags += spec[p];
    ++p;
  }
  if (p < spec.size() && spec[p] == '0') {
    if (fs.align == 0) {
      fs.fill = '0';
      fs.align = '=';
    }
    ++p;
  }
  LLM_ASSIGN_OR_RETURN(fs.width, SpecNumber(spec, p, "a format width"));
  if (p < spec.size() && spec[p] == '.') {
    ++p;
    LLM_ASSIGN_OR_RETURN(fs.precision, SpecNumber(spec, p, "a format precision"));
  }
  fs.type = p < spec.size() ? spec[p++] : 0;
  if (p != spec.size()) return Error(absl::StrCat("Invalid format specifier '", spec, "'"));
  return fs;
}

// `v` converted ("r": repr) and formatted by `fs`, padded to its width.
absl::StatusOr<std::string> FormatField(const Value& v, const std::string& conversion,
                                        FormatSpec fs) {
  std::string s;
  if (conversion == "r") {
    s = Repr(v);
  } else if (fs.type == 0 && v.kind == K::kFloat && fs.precision >= 0) {
    fs.type = 'g';
  }
  if (s.empty() && (fs.type == 0 || fs.type == 's')) {
    s = conversion == "r" ? Repr(v) : ToStr(v);
    if (fs.precision >= 0 && fs.type == 's') {
      LLM_ASSIGN_OR_RETURN(s, Convert(Value::Str(s), 's', "", 0, fs.precision));
    }
  } else if (s.empty()) {
    LLM_ASSIGN_OR_RETURN(s, Number(v, fs.type == 'n' ? 'd' : fs.type, fs.flags, fs.precision));
  }
  if (fs.align == 0) fs.align = (v.is_number() && conversion.empty()) ? '>' : '<';
  return Pad(s, static_cast<size_t>(fs.width), fs.align, fs.fill);
}

}  // namespace

absl::StatusOr<std::string> StrFormat(const std::string& f, const Args& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if ((c == '{' || c == '}') && i + 1 < f.size() && f[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c == '}') return Error("Single '}' encountered in format string");
    if (c != '{') {
      out += c;
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string::npos) return Error("Single '{' encountered in format string");
    const ReplacementField r = SplitField(f.substr(i + 1, close - i - 1));
    i = close;
    LLM_ASSIGN_OR_RETURN(const Value* v, FieldArgument(r.field, args, auto_index));
    if (v == nullptr) return Error(absl::StrCat("format: no argument for '{", r.field, "}'"));
    LLM_ASSIGN_OR_RETURN(const FormatSpec fs, ParseFormatSpec(r.spec));
    LLM_ASSIGN_OR_RETURN(std::string s, FormatField(*v, r.conversion, fs));
    out += s;
  }
  return out;
}

}  // namespace llm::frontend::jinja
