#include "worker/frontend/chat/jinja_builtins.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <ctime>
#include <set>

#include "absl/strings/str_cat.h"
#include "worker/frontend/chat/jinja_format.h"

namespace llm::frontend::jinja {

namespace {

using K = Value::Kind;

absl::Status Error(const std::string& what) { return absl::InvalidArgumentError(what); }

// The undefined value's own message when an operation needs a defined one.
absl::Status UndefinedError(const Value& v) {
  return Error(v.s.empty() ? "a value is undefined" : v.s);
}

bool PySpace(unsigned char c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

// Python str.strip/lstrip/rstrip with `chars` (null: whitespace), by code point.
std::string Strip(const std::string& s, const Value* chars, bool left, bool right) {
  const std::vector<std::string> cps = CodePoints(s);
  std::set<std::string> set;
  const bool ws = chars == nullptr || chars->none();
  if (!ws) {
    for (auto& c : CodePoints(chars->s)) set.insert(c);
  }
  const auto strip = [&](const std::string& c) {
    if (!ws) return set.count(c) > 0;
    if (c.size() == 1) return PySpace(static_cast<unsigned char>(c[0]));
    return c == "\xc2\x85" || c == "\xc2\xa0" || c == "\xe2\x80\xa8" || c == "\xe2\x80\xa9" ||
           c == "\xe3\x80\x80" ||
           (c.size() == 3 && c[0] == '\xe2' && c[1] == '\x80' &&
            static_cast<unsigned char>(c[2]) <= 0x8a);
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip(cps[e - 1])) --e;
  }
  std::string out;
  for (size_t i = b; i < e; ++i) out += cps[i];
  return out;
}

std::vector<std::string> Split(const std::string& s, const Value* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep == nullptr || sep->none()) {
    // Runs of whitespace; no empty strings.
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && PySpace(static_cast<unsigned char>(s[i]))) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        std::string rest = s.substr(i);
        while (!rest.empty() && PySpace(static_cast<unsigned char>(rest.back()))) rest.pop_back();
        out.push_back(rest);
        return out;
      }
      size_t j = i;
      while (j < s.size() && !PySpace(static_cast<unsigned char>(s[j]))) ++j;
      out.push_back(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  const std::string& d = sep->s;
  size_t start = 0;
  for (;;) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) break;
    const size_t at = s.find(d, start);
    if (at == std::string::npos) break;
    out.push_back(s.substr(start, at - start));
    start = at + d.size();
  }
  out.push_back(s.substr(start));
  return out;
}

std::string Replace(const std::string& s, const std::string& old, const std::string& with,
                    int64_t count) {
  if (old.empty()) {
    // Python inserts `with` between every character (and at both ends).
    std::string out = with;
    int64_t n = 1;
    for (const auto& c : CodePoints(s)) {
      out += c;
      if (count < 0 || n < count) {
        out += with;
        ++n;
      }
    }
    return out;
  }
  std::string out;
  size_t start = 0;
  int64_t n = 0;
  for (;;) {
    const size_t at = s.find(old, start);
    if (at == std::string::npos || (count >= 0 && n >= count)) break;
    out += s.substr(start, at - start) + with;
    start = at + old.size();
    ++n;
  }
  return out + s.substr(start);
}

Value StrList(const std::vector<std::string>& v) {
  List l;
  for (const auto& s : v) l.push_back(Value::Str(s));
  return Value::MakeList(std::move(l));
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string Title(const std::string& s) {
  std::string out = s;
  bool prev_alpha = false;
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    const bool alpha = std::isalpha(u) != 0;
    if (alpha) c = static_cast<char>(prev_alpha ? std::tolower(u) : std::toupper(u));
    prev_alpha = alpha;
  }
  return out;
}
std::string Capitalize(const std::string& s) {
  std::string out = Lower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

// Python's int(s) for a string: optional whitespace and sign, digits (and '_' between them).
std::optional<int64_t> ParseInt(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && PySpace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && PySpace(static_cast<unsigned char>(s[e - 1]))) --e;
  std::string digits;
  size_t i = b;
  if (i < e && (s[i] == '+' || s[i] == '-')) digits += s[i++];
  if (i >= e) return std::nullopt;
  for (; i < e; ++i) {
    if (std::isdigit(static_cast<unsigned char>(s[i]))) {
      digits += s[i];
    } else if (s[i] != '_' || i + 1 >= e || !std::isdigit(static_cast<unsigned char>(s[i + 1])) ||
               !std::isdigit(static_cast<unsigned char>(s[i - 1]))) {
      return std::nullopt;
    }
  }
  errno = 0;
  const long long x = std::strtoll(digits.c_str(), nullptr, 10);
  if (errno == ERANGE) return std::nullopt;
  return x;
}

// Python's float(s) for a string: surrounding whitespace allowed, the whole rest a number
// (including "inf" and "nan").
std::optional<double> ParseFloat(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && PySpace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && PySpace(static_cast<unsigned char>(s[e - 1]))) --e;
  const std::string t = s.substr(b, e - b);
  if (t.empty() || t.find_first_of("xXpP") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return x;
}

// A bound method of a string or dict.
Value Method(const Value& self, const std::string& name) {
  return Value::MakeFunction([self, name](Args& a) -> absl::StatusOr<Value> {
    if (self.is_string()) {
      const std::string& s = self.s;
      if (name == "strip" || name == "lstrip" || name == "rstrip") {
        auto chars = a.Take(0, "chars");
        return Value::Str(Strip(s, chars ? &*chars : nullptr, name != "rstrip", name != "lstrip"));
      }
      if (name == "split") {
        auto sep = a.Take(0, "sep");
        auto max = a.Take(1, "maxsplit");
        return StrList(Split(s, sep ? &*sep : nullptr, max ? max->i : -1));
      }
      if (name == "startswith" || name == "endswith") {
        auto arg = a.Take(0, "prefix");
        if (!arg) return Error(name + "() takes at least 1 argument");
        auto start = a.Take(1, "start"), end = a.Take(2, "end");
        if ((start && !start->none()) || (end && !end->none())) {
          // s[start:end], by code point
          const auto cps = CodePoints(self.s);
          const auto n = static_cast<int64_t>(cps.size());
          const auto index = [n](const std::optional<Value>& x, int64_t def) {
            if (!x || x->none()) return def;
            const int64_t i = x->i < 0 ? x->i + n : x->i;
            return std::clamp<int64_t>(i, 0, n);
          };
          std::string sub;
          for (int64_t i = index(start, 0); i < index(end, n); ++i) {
            sub += cps[static_cast<size_t>(i)];
          }
          Args rest;
          rest.pos.push_back(*arg);
          return (*Method(Value::Str(sub), name).fn)(rest);
        }
        std::vector<std::string> opts;
        if (arg->kind == K::kList) {
          for (const Value& x : *arg->list) opts.push_back(x.s);
        } else {
          opts.push_back(arg->s);
        }
        for (const auto& o : opts) {
          const bool hit =
              name == "startswith"
                  ? s.compare(0, o.size(), o) == 0
                  : s.size() >= o.size() && s.compare(s.size() - o.size(), o.size(), o) == 0;
          if (hit) return Value::Bool(true);
        }
        return Value::Bool(false);
      }
      if (name == "lower") return Value::Str(Lower(s));
      if (name == "upper") return Value::Str(Upper(s));
      if (name == "title") return Value::Str(Title(s));
      if (name == "capitalize") return Value::Str(Capitalize(s));
      if (name == "replace") {
        auto o = a.Take(0, "old"), w = a.Take(1, "new"), c = a.Take(2, "count");
        if (!o || !w) return Error("replace() takes at least 2 arguments");
        return Value::Str(Replace(s, o->s, w->s, c ? c->i : -1));
      }
      if (name == "format") {
        auto r = StrFormat(s, a);
        if (!r.ok()) return r.status();
        return Value::Str(*std::move(r));
      }
      if (name == "join") {
        auto items = a.Take(0, "iterable");
        if (!items || items->kind != K::kList) return Error("join() takes a list");
        std::string out;
        for (size_t i = 0; i < items->list->size(); ++i) {
          if (i > 0) out += s;
          out += ToStr((*items->list)[i]);
        }
        return Value::Str(out);
      }
      if (name == "count" || name == "find" || name == "rfind" || name == "index") {
        auto sub = a.Take(0, "sub");
        if (!sub) return Error(name + "() takes 1 argument");
        if (name == "count") {
          int64_t n = 0;
          for (size_t at = s.find(sub->s); at != std::string::npos && !sub->s.empty();
               at = s.find(sub->s, at + sub->s.size())) {
            ++n;
          }
          return Value::Int(n);
        }
        const size_t at = name == "rfind" ? s.rfind(sub->s) : s.find(sub->s);
        if (at == std::string::npos) {
          if (name == "index") return Error("substring not found");
          return Value::Int(-1);
        }
        return Value::Int(static_cast<int64_t>(CodePoints(s.substr(0, at)).size()));
      }
      if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum") {
        if (s.empty()) return Value::Bool(false);
        for (const char ch : s) {
          const auto u = static_cast<unsigned char>(ch);
          const bool ok = name == "isdigit"   ? std::isdigit(u) != 0
                          : name == "isalpha" ? std::isalpha(u) != 0
                          : name == "isspace" ? PySpace(u)
                                              : std::isalnum(u) != 0;
          if (!ok) return Value::Bool(false);
        }
        return Value::Bool(true);
      }
      if (name == "rsplit") {
        auto sep = a.Take(0, "sep");
        auto max = a.Take(1, "maxsplit");
        const int64_t maxsplit = max ? max->i : -1;
        std::vector<std::string> parts = Split(s, sep ? &*sep : nullptr, -1);
        if (maxsplit < 0 || parts.size() <= static_cast<size_t>(maxsplit) + 1) {
          return StrList(parts);
        }
        // The leftmost parts stay joined: by the separator, or as the text before the rest.
        const size_t keep = parts.size() - static_cast<size_t>(maxsplit);
        std::string head;
        if (sep && !sep->none()) {
          for (size_t i = 0; i < keep; ++i) head += (i > 0 ? sep->s : "") + parts[i];
        } else {
          size_t at = s.size();
          for (size_t i = parts.size(); i-- > keep;) at = s.rfind(parts[i], at - 1);
          head = Strip(s.substr(0, at), nullptr, /*left=*/false, /*right=*/true);
        }
        std::vector<std::string> out = {head};
        out.insert(out.end(), parts.begin() + static_cast<long>(keep), parts.end());
        return StrList(out);
      }
      if (name == "zfill") {
        auto width = a.Take(0, "width");
        const auto n = static_cast<int64_t>(CodePoints(s).size());
        if (!width || width->i <= n) return Value::Str(s);
        const size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
        return Value::Str(s.substr(0, sign) + std::string(static_cast<size_t>(width->i - n), '0') +
                          s.substr(sign));
      }
      if (name == "splitlines") {
        std::vector<std::string> lines;
        std::string cur;
        for (size_t i = 0; i < s.size(); ++i) {
          if (s[i] == '\n' || s[i] == '\r') {
            lines.push_back(cur);
            cur.clear();
            if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
          } else {
            cur += s[i];
          }
        }
        if (!cur.empty()) lines.push_back(cur);
        return StrList(lines);
      }
    }
    if (self.kind == K::kDict) {
      const Dict& d = *self.dict;
      if (name == "items") {
        List l;
        for (const auto& [k, v] : d) {
          l.push_back(Value::MakeList({Value::Str(k), v}, /*tuple=*/true));
        }
        return Value::MakeList(std::move(l));
      }
      if (name == "keys") {
        List l;
        for (const auto& [k, v] : d) l.push_back(Value::Str(k));
        return Value::MakeList(std::move(l));
      }
      if (name == "values") {
        List l;
        for (const auto& [k, v] : d) l.push_back(v);
        return Value::MakeList(std::move(l));
      }
      if (name == "get") {
        auto key = a.Take(0, "key");
        auto def = a.Take(1, "default");
        if (!key) return Error("get() takes at least 1 argument");
        if (const Value* v = Find(d, ToStr(*key))) return *v;
        return def ? *def : Value::None();
      }
    }
    return Error(absl::StrCat("'", TypeName(self), "' object has no method '", name, "'"));
  });
}

bool IsStringMethod(const std::string& n) {
  static const std::set<std::string> kNames = {
      "strip", "lstrip",     "rstrip",  "split",   "startswith", "endswith",   "lower",  "upper",
      "title", "capitalize", "replace", "format",  "join",       "count",      "find",   "rfind",
      "index", "isdigit",    "isalpha", "isspace", "isalnum",    "splitlines", "rsplit", "zfill"};
  return kNames.count(n) > 0;
}

}  // namespace

absl::StatusOr<Value> GetAttr(const Value& v, const std::string& name) {
  switch (v.kind) {
    case K::kUndefined:
      return UndefinedError(v);
    case K::kString:
      if (IsStringMethod(name)) return Method(v, name);
      break;
    case K::kDict:
      if (name == "items" || name == "keys" || name == "values" || name == "get") {
        return Method(v, name);
      }
      if (const Value* x = Find(*v.dict, name)) return *x;
      break;
    case K::kNamespace:
      if (const Value* x = Find(v.ns->attrs, name)) return *x;
      break;
    default:
      break;
  }
  return Value::Undefined(absl::StrCat("'", TypeName(v), " object' has no attribute '", name, "'"));
}

absl::StatusOr<Value> GetItem(const Value& v, const Value& key) {
  switch (v.kind) {
    case K::kUndefined:
      return UndefinedError(v);
    case K::kList:
      if (key.kind == K::kInt || key.kind == K::kBool) {
        int64_t i = key.kind == K::kBool ? key.b : key.i;
        const auto n = static_cast<int64_t>(v.list->size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return (*v.list)[static_cast<size_t>(i)];
      }
      break;
    case K::kString:
      if (key.kind == K::kInt) {
        const auto cps = CodePoints(v.s);
        int64_t i = key.i;
        const auto n = static_cast<int64_t>(cps.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return Value::Str(cps[static_cast<size_t>(i)]);
      }
      break;
    case K::kDict:  // keys are strings (from JSON or literals)
      if (key.is_string()) {
        if (const Value* x = Find(*v.dict, key.s)) return *x;
      }
      break;
    default:
      break;
  }
  if (key.is_string()) return GetAttr(v, key.s);
  return Value::Undefined(absl::StrCat("'", TypeName(v), " object' has no item ", Repr(key)));
}

absl::StatusOr<List> Iterate(const Value& v) {
  switch (v.kind) {
    case K::kUndefined:
      return List{};
    case K::kList:
      return *v.list;
    case K::kDict: {
      List keys;
      for (const auto& [k, x] : *v.dict) keys.push_back(Value::Str(k));
      return keys;
    }
    case K::kString: {
      List chars;
      for (auto& c : CodePoints(v.s)) chars.push_back(Value::Str(c));
      return chars;
    }
    default:
      return Error(absl::StrCat("'", TypeName(v), "' object is not iterable"));
  }
}

// ---- Tests ----

bool HasTest(const std::string& n) {
  static const std::set<std::string> kNames = {
      "defined",  "undefined", "none",    "string", "mapping",     "iterable",
      "sequence", "number",    "integer", "float",  "boolean",     "true",
      "false",    "equalto",   "eq",      "==",     "ne",          "!=",
      "lt",       "<",         "gt",      ">",      "le",          "<=",
      "ge",       ">=",        "in",      "odd",    "even",        "divisibleby",
      "callable", "lower",     "upper",   "sameas", "greaterthan", "lessthan"};
  return kNames.count(n) > 0;
}

absl::StatusOr<bool> ApplyTest(const std::string& n, const Value& v, Args& args) {
  if (n == "defined") return !v.undefined();
  if (n == "undefined") return v.undefined();
  if (n == "none") return v.none();
  if (n == "string") return v.is_string();
  if (n == "mapping") return v.kind == K::kDict;
  if (n == "iterable") {
    return v.kind == K::kList || v.kind == K::kDict || v.kind == K::kString || v.undefined();
  }
  if (n == "sequence") return v.kind == K::kList || v.kind == K::kDict || v.kind == K::kString;
  if (n == "number") return v.kind == K::kInt || v.kind == K::kFloat || v.kind == K::kBool;
  if (n == "integer") return v.kind == K::kInt;
  if (n == "float") return v.kind == K::kFloat;
  if (n == "boolean") return v.kind == K::kBool;
  if (n == "true") return v.kind == K::kBool && v.b;
  if (n == "false") return v.kind == K::kBool && !v.b;
  if (n == "callable") return v.kind == K::kFunction;
  if (n == "lower") return v.is_string() && Lower(v.s) == v.s;
  if (n == "upper") return v.is_string() && Upper(v.s) == v.s;
  auto other = args.Take(0, "other");
  if (n == "odd" || n == "even") {
    if (v.kind != K::kInt) return Error("odd/even: not an integer");
    return (((v.i % 2) + 2) % 2 == 1) == (n == "odd");
  }
  if (!other) return Error(absl::StrCat("test '", n, "' takes an argument"));
  if (n == "equalto" || n == "eq" || n == "==") return Equal(v, *other);
  if (n == "ne" || n == "!=") return !Equal(v, *other);
  if (n == "sameas") return Equal(v, *other) && v.kind == other->kind;
  if (n == "divisibleby") return other->i != 0 && v.i % other->i == 0;
  if (n == "in") {
    if (other->kind == K::kList) {
      for (const Value& x : *other->list) {
        if (Equal(v, x)) return true;
      }
      return false;
    }
    if (other->is_string()) return other->s.find(ToStr(v)) != std::string::npos;
    if (other->kind == K::kDict) return Find(*other->dict, ToStr(v)) != nullptr;
    return false;
  }
  auto c = Compare(v, *other);
  if (!c.ok()) return c.status();
  if (n == "lt" || n == "<" || n == "lessthan") return *c < 0;
  if (n == "gt" || n == ">" || n == "greaterthan") return *c > 0;
  if (n == "le" || n == "<=") return *c <= 0;
  return *c >= 0;
}

// ---- Filters ----

bool HasFilter(const std::string& n) {
  static const std::set<std::string> kNames = {
      "tojson",     "trim",       "length", "count",  "items",      "indent",   "string",
      "selectattr", "rejectattr", "select", "reject", "list",       "join",     "map",
      "default",    "d",          "lower",  "upper",  "capitalize", "title",    "first",
      "last",       "replace",    "int",    "float",  "abs",        "round",    "unique",
      "sort",       "reverse",    "safe",   "e",      "escape",     "dictsort", "wordcount",
      "center",     "truncate",   "min",    "max",    "sum",        "batch"};
  return kNames.count(n) > 0;
}

namespace {

int64_t Length(const Value& v) {
  switch (v.kind) {
    case K::kList:
      return static_cast<int64_t>(v.list->size());
    case K::kDict:
      return static_cast<int64_t>(v.dict->size());
    case K::kString:
      return static_cast<int64_t>(CodePoints(v.s).size());
    default:
      return 0;
  }
}

// select/reject/selectattr/rejectattr: keep items whose (attribute's) test result is `keep`.
absl::StatusOr<Value> SelectItems(const Value& v, Args& args, bool by_attr, bool keep) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  std::string attr;
  size_t next = 0;
  if (by_attr) {
    if (args.pos.empty()) return Error("selectattr/rejectattr need an attribute name");
    attr = args.pos[0].s;
    next = 1;
  }
  std::string test;
  Args rest;
  if (next < args.pos.size()) {
    test = args.pos[next].s;
    rest.pos.assign(args.pos.begin() + static_cast<long>(next) + 1, args.pos.end());
    if (!HasTest(test)) return Error(absl::StrCat("No test named '", test, "'."));
  }
  List out;
  for (const Value& item : *items) {
    Value subject = item;
    if (by_attr) {
      auto a = GetAttr(item, attr);
      if (!a.ok()) return a.status();
      subject = *a;
    }
    bool result;
    if (test.empty()) {
      result = Truthy(subject);
    } else {
      Args copy = rest;
      auto r = ApplyTest(test, subject, copy);
      if (!r.ok()) return r.status();
      result = *r;
    }
    if (result == keep) out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}

std::string Indent(const std::string& s0, const Value* width, bool first, bool blank) {
  const std::string ind =
      width == nullptr
          ? "    "
          : (width->is_string() ? width->s : std::string(static_cast<size_t>(width->i), ' '));
  std::string s = s0 + "\n";
  std::vector<std::string> lines;
  std::string cur;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(cur);
      cur.clear();
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      cur += s[i];
    }
  }
  if (!cur.empty()) lines.push_back(cur);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) rv += "\n" + ind;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : ind + lines[i]);
  }
  if (first) rv = ind + rv;
  return rv;
}

std::string Escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<Value> ApplyFilter(const std::string& n, const Value& v, Args& args) {
  if (n == "default" || n == "d") {
    auto def = args.Take(0, "default_value");
    auto boolean = args.Take(1, "boolean");
    const bool use_default = v.undefined() || (boolean && Truthy(*boolean) && !Truthy(v));
    return use_default ? (def ? *def : Value::Str("")) : v;
  }
  if (n == "length" || n == "count") return Value::Int(Length(v));
  if (n == "string") return Value::Str(ToStr(v));
  if (n == "safe") return v;
  if (n == "list") {
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    return Value::MakeList(*std::move(items));
  }
  if (n == "items") {
    if (v.undefined()) return Value::MakeList({});
    if (v.kind != K::kDict)
      return Error(absl::StrCat("items: expected a mapping, got ", TypeName(v)));
    List l;
    for (const auto& [k, x] : *v.dict) {
      l.push_back(Value::MakeList({Value::Str(k), x}, /*tuple=*/true));
    }
    return Value::MakeList(std::move(l));
  }
  if (n == "tojson") {
    // Hugging Face's tojson(x, ensure_ascii=False, indent=None, separators=None,
    // sort_keys=False), which returns json.dumps(x, ...) with those arguments.
    if (v.undefined()) return UndefinedError(v);
    JsonOptions o;
    if (auto ascii = args.Take(0, "ensure_ascii")) o.ensure_ascii = Truthy(*ascii);
    if (auto indent = args.Take(1, "indent"); indent && !indent->none()) {
      if (indent->is_string()) {
        o.indent = indent->s;
      } else {
        o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent->i)), ' ');
      }
    }
    if (auto sep = args.Take(2, "separators"); sep && !sep->none()) {
      if (sep->kind != K::kList || sep->list->size() != 2) {
        return Error("tojson: separators must be an (item_separator, key_separator) pair");
      }
      o.separators.emplace(ToStr((*sep->list)[0]), ToStr((*sep->list)[1]));
    }
    if (auto sort = args.Take(3, "sort_keys")) o.sort_keys = Truthy(*sort);
    auto j = ToJson(v, o);
    if (!j.ok()) return j.status();
    return Value::Str(*std::move(j));
  }
  if (n == "selectattr" || n == "rejectattr") return SelectItems(v, args, true, n == "selectattr");
  if (n == "select" || n == "reject") return SelectItems(v, args, false, n == "select");
  if (n == "map") {
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    auto attr = args.Take(99, "attribute");
    auto def = args.Take(99, "default");
    List out;
    for (const Value& item : *items) {
      if (attr) {
        auto a = GetAttr(item, ToStr(*attr));
        if (!a.ok()) return a.status();
        out.push_back(a->undefined() && def ? *def : *a);
      } else {
        if (args.pos.empty()) return Error("map: needs a filter name or attribute=");
        Args rest;
        rest.pos.assign(args.pos.begin() + 1, args.pos.end());
        rest.kw = args.kw;
        if (!HasFilter(args.pos[0].s))
          return Error(absl::StrCat("No filter named '", args.pos[0].s, "'."));
        auto r = ApplyFilter(args.pos[0].s, item, rest);
        if (!r.ok()) return r.status();
        out.push_back(*r);
      }
    }
    return Value::MakeList(std::move(out));
  }
  if (n == "join") {
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    auto d = args.Take(0, "d");
    auto attr = args.Take(1, "attribute");
    std::string out;
    for (size_t i = 0; i < items->size(); ++i) {
      if (i > 0 && d) out += ToStr(*d);
      Value x = (*items)[i];
      if (attr) {
        auto a = GetAttr(x, ToStr(*attr));
        if (!a.ok()) return a.status();
        x = *a;
      }
      out += ToStr(x);
    }
    return Value::Str(out);
  }
  if (n == "first" || n == "last") {
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    if (items->empty()) return Value::Undefined("No first item, sequence was empty.");
    return n == "first" ? items->front() : items->back();
  }
  if (n == "reverse") {
    if (v.is_string()) {
      auto cps = CodePoints(v.s);
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
      return Value::Str(out);
    }
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    std::reverse(items->begin(), items->end());
    return Value::MakeList(*std::move(items));
  }
  if (n == "unique") {
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    // jinja2's unique(case_sensitive=False, attribute=None): the first of each.
    auto case_sensitive = args.Take(0, "case_sensitive");
    auto attr = args.Take(1, "attribute");
    const auto key = [&](const Value& x) {
      Value k = attr ? GetAttr(x, ToStr(*attr)).value_or(Value()) : x;
      if (k.is_string() && !(case_sensitive && Truthy(*case_sensitive))) k.s = Lower(k.s);
      return k;
    };
    List out, seen;
    for (const Value& x : *items) {
      const Value k = key(x);
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& y) { return Equal(k, y); })) {
        seen.push_back(k);
        out.push_back(x);
      }
    }
    return Value::MakeList(std::move(out));
  }
  if (n == "sort" || n == "dictsort") {
    auto items = n == "dictsort" ? ApplyFilter("items", v, args) : absl::StatusOr<Value>(v);
    if (!items.ok()) return items.status();
    auto list = Iterate(*items);
    if (!list.ok()) return list.status();
    auto reverse = args.Take(0, "reverse");
    auto attr = args.Take(2, "attribute");
    absl::Status st;
    std::stable_sort(list->begin(), list->end(), [&](const Value& a, const Value& b) {
      Value x = a, y = b;
      if (attr) {
        x = GetAttr(a, ToStr(*attr)).value_or(Value());
        y = GetAttr(b, ToStr(*attr)).value_or(Value());
      }
      if (x.is_string() && y.is_string()) {
        x = Value::Str(Lower(x.s));
        y = Value::Str(Lower(y.s));
      }
      auto c = Compare(x, y);
      if (!c.ok()) {
        st = c.status();
        return false;
      }
      return (reverse && Truthy(*reverse)) ? *c > 0 : *c < 0;
    });
    if (!st.ok()) return st;
    return Value::MakeList(*std::move(list));
  }
  if (n == "sum" || n == "min" || n == "max") {
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    if (n == "sum") {  // sum(iterable, attribute=None, start=0)
      auto attr = args.Take(0, "attribute");
      auto start = args.Take(1, "start");
      Value total = start ? *start : Value::Int(0);
      for (const Value& x : *items) {
        const Value y = attr ? GetAttr(x, ToStr(*attr)).value_or(Value()) : x;
        const bool nums =
            (total.is_number() || total.kind == K::kBool) && (y.is_number() || y.kind == K::kBool);
        if (!nums) {
          return Error(absl::StrCat("unsupported operand type(s) for +: '", TypeName(total),
                                    "' and '", TypeName(y), "'"));
        }
        if (total.kind != K::kFloat && y.kind != K::kFloat) {
          total = Value::Int((total.kind == K::kBool ? total.b : total.i) +
                             (y.kind == K::kBool ? y.b : y.i));
        } else {
          total = Value::Float(total.number() + y.number());
        }
      }
      return total;
    }
    // min/max(value, case_sensitive=False, attribute=None): the first extreme item.
    auto case_sensitive = args.Take(0, "case_sensitive");
    auto attr = args.Take(1, "attribute");
    const auto key = [&](const Value& x) {
      Value k = attr ? GetAttr(x, ToStr(*attr)).value_or(Value()) : x;
      if (k.is_string() && !(case_sensitive && Truthy(*case_sensitive))) k.s = Lower(k.s);
      return k;
    };
    if (items->empty()) return Value::Undefined("No aggregated item, sequence was empty.");
    size_t best = 0;
    for (size_t i = 1; i < items->size(); ++i) {
      auto c = Compare(key((*items)[i]), key((*items)[best]));
      if (!c.ok()) return c.status();
      if (n == "min" ? *c < 0 : *c > 0) best = i;
    }
    return (*items)[best];
  }
  if (v.undefined() && n != "trim" && n != "lower" && n != "upper") return UndefinedError(v);
  if (n == "trim") {
    auto chars = args.Take(0, "chars");
    return Value::Str(Strip(ToStr(v), chars ? &*chars : nullptr, true, true));
  }
  if (n == "lower") return Value::Str(Lower(ToStr(v)));
  if (n == "upper") return Value::Str(Upper(ToStr(v)));
  if (n == "capitalize") return Value::Str(Capitalize(ToStr(v)));
  if (n == "title") return Value::Str(Title(ToStr(v)));
  if (n == "e" || n == "escape") return Value::Str(Escape(ToStr(v)));
  if (n == "indent") {
    auto width = args.Take(0, "width");
    auto first = args.Take(1, "first");
    auto blank = args.Take(2, "blank");
    return Value::Str(Indent(ToStr(v), width ? &*width : nullptr, first && Truthy(*first),
                             blank && Truthy(*blank)));
  }
  if (n == "replace") {
    auto o = args.Take(0, "old"), w = args.Take(1, "new"), c = args.Take(2, "count");
    if (!o || !w) return Error("replace: takes old and new");
    return Value::Str(Replace(ToStr(v), ToStr(*o), ToStr(*w), c && !c->none() ? c->i : -1));
  }
  if (n == "int") {
    // jinja2: int(value), else int(float(value)), else the default (0).
    auto def = args.Take(0, "default");
    if (v.kind == K::kInt) return v;
    if (v.kind == K::kBool) return Value::Int(v.b);
    if (v.kind == K::kFloat) {
      if (std::isfinite(v.f)) return Value::Int(static_cast<int64_t>(std::trunc(v.f)));
    } else if (v.is_string()) {
      if (auto i = ParseInt(v.s)) return Value::Int(*i);
      if (auto f = ParseFloat(v.s); f && std::isfinite(*f)) {
        return Value::Int(static_cast<int64_t>(std::trunc(*f)));
      }
    }
    return def ? *def : Value::Int(0);
  }
  if (n == "float") {
    auto def = args.Take(0, "default");
    if (v.is_number() || v.kind == K::kBool) return Value::Float(v.number());
    if (v.is_string()) {
      if (auto f = ParseFloat(v.s)) return Value::Float(*f);
    }
    return def ? *def : Value::Float(0);
  }
  if (n == "abs") {
    if (v.kind == K::kInt) return Value::Int(v.i < 0 ? -v.i : v.i);
    return Value::Float(std::fabs(v.number()));
  }
  if (n == "round") {
    // jinja2's round(value, precision=0, method='common'): 'common' is Python's round()
    // (half to even, on the exact binary value); 'ceil' and 'floor' give floats.
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
      if (v.kind != K::kFloat) {
        const int64_t i = v.kind == K::kBool ? v.b : v.i;
        if (p >= 0) return Value::Int(i);
        if (p < -18) return Value::Int(0);
        // round(int, -k): to a multiple of 10^k, ties to the even multiple.
        int64_t m = 1;
        for (int64_t k = 0; k < -p; ++k) m *= 10;
        int64_t q = i / m, r = i % m;
        if (r < 0) {
          --q;
          r += m;
        }
        if (2 * r > m || (2 * r == m && q % 2 != 0)) ++q;
        return Value::Int(q * m);
      }
      char buf[512];
      if (p >= 0 && p < 300) {
        std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(p), v.number());
        return Value::Float(std::strtod(buf, nullptr));
      }
      const double m = std::pow(10.0, static_cast<double>(p));
      return Value::Float(std::nearbyint(v.number() * m) / m);
    }
    const double m = std::pow(10.0, static_cast<double>(p));
    const double x = v.number() * m;
    return Value::Float((how == "ceil" ? std::ceil(x) : std::floor(x)) / m);
  }
  if (n == "wordcount")
    return Value::Int(static_cast<int64_t>(Split(ToStr(v), nullptr, -1).size()));
  return Error(absl::StrCat("the filter '", n, "' is not supported"));
}

// ---- Globals ----

Dict Globals(const std::string& today) {
  Dict g;
  g.emplace_back("range", Value::MakeFunction([](Args& a) -> absl::StatusOr<Value> {
                   int64_t start = 0, stop = 0, step = 1;
                   if (a.pos.size() == 1) {
                     stop = a.pos[0].i;
                   } else if (a.pos.size() >= 2) {
                     start = a.pos[0].i;
                     stop = a.pos[1].i;
                     if (a.pos.size() > 2) step = a.pos[2].i;
                   }
                   if (step == 0) return Error("range() arg 3 must not be zero");
                   List l;
                   for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                     if (l.size() >= 100000)
                       return absl::ResourceExhaustedError("range(): too long");
                     l.push_back(Value::Int(i));
                   }
                   return Value::MakeList(std::move(l));
                 }));
  g.emplace_back("namespace", Value::MakeFunction([](Args& a) -> absl::StatusOr<Value> {
                   Value v;
                   v.kind = K::kNamespace;
                   v.ns = std::make_shared<Namespace>();
                   for (const Value& p : a.pos) {
                     if (p.kind != K::kDict) {
                       return Error(absl::StrCat("'", TypeName(p), "' object is not iterable"));
                     }
                     v.ns->attrs = *p.dict;
                   }
                   for (auto& [k, x] : a.kw) v.ns->attrs.emplace_back(k, x);
                   return v;
                 }));
  g.emplace_back("dict", Value::MakeFunction([](Args& a) -> absl::StatusOr<Value> {
                   // dict(mapping_or_pairs, **kwargs); later keys replace earlier ones.
                   Dict d;
                   const auto set = [&d](const std::string& k, const Value& x) {
                     for (auto& [dk, dx] : d) {
                       if (dk == k) {
                         dx = x;
                         return;
                       }
                     }
                     d.emplace_back(k, x);
                   };
                   if (a.pos.size() > 1) return Error("dict expected at most 1 argument");
                   if (!a.pos.empty()) {
                     const Value& m = a.pos[0];
                     if (m.kind == K::kDict) {
                       for (const auto& [k, x] : *m.dict) set(k, x);
                     } else if (m.kind == K::kList) {
                       for (const Value& pair : *m.list) {
                         if (pair.kind != K::kList || pair.list->size() != 2) {
                           return Error("dict(): each item must be a (key, value) pair");
                         }
                         set(ToStr((*pair.list)[0]), (*pair.list)[1]);
                       }
                     } else {
                       return Error(absl::StrCat("'", TypeName(m), "' object is not iterable"));
                     }
                   }
                   for (auto& [k, x] : a.kw) set(k, x);
                   return Value::MakeDict(std::move(d));
                 }));
  g.emplace_back("raise_exception", Value::MakeFunction([](Args& a) -> absl::StatusOr<Value> {
                   absl::Status st = absl::InvalidArgumentError(absl::StrCat(
                       "chat template raised: ", a.pos.empty() ? std::string() : ToStr(a.pos[0])));
                   st.SetPayload(kRaisedPayload, absl::Cord("1"));
                   return st;
                 }));
  g.emplace_back("strftime_now", Value::MakeFunction([today](Args& a) -> absl::StatusOr<Value> {
                   std::tm tm{};
                   if (!today.empty()) {
                     tm.tm_year = std::atoi(today.substr(0, 4).c_str()) - 1900;
                     tm.tm_mon = std::atoi(today.substr(5, 2).c_str()) - 1;
                     tm.tm_mday = std::atoi(today.substr(8, 2).c_str());
                     tm.tm_hour = 12;
                     std::tm copy = tm;
                     const std::time_t t =
                         std::mktime(&copy);  // fills the weekday and day of the year
                     localtime_r(&t, &tm);
                   } else {
                     const std::time_t t = std::time(nullptr);
                     localtime_r(&t, &tm);
                   }
                   char buf[256];
                   const std::string fmt = a.pos.empty() ? "" : ToStr(a.pos[0]);
                   const size_t n = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
                   return Value::Str(std::string(buf, n));
                 }));
  return g;
}

}  // namespace llm::frontend::jinja
