#include "worker/frontend/chat/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <set>

#include "absl/strings/str_cat.h"

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

// Python str.format with positional ({} {0}) and named ({name}) fields; specs are ignored.
absl::StatusOr<std::string> Format(const std::string& f, Args& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '{' && i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < f.size() && f[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      const size_t close = f.find('}', i);
      if (close == std::string::npos) return Error("format: single '{' encountered");
      std::string field = f.substr(i + 1, close - i - 1);
      field = field.substr(0, field.find_first_of(":!"));
      const Value* v = nullptr;
      if (field.empty()) {
        if (auto_index < args.pos.size()) v = &args.pos[auto_index++];
      } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
        const size_t k = std::stoul(field);
        if (k < args.pos.size()) v = &args.pos[k];
      } else {
        for (const auto& [name, x] : args.kw) {
          if (name == field) v = &x;
        }
      }
      if (v == nullptr) return Error(absl::StrCat("format: no argument for '{", field, "}'"));
      out += ToStr(*v);
      i = close;
    } else {
      out += c;
    }
  }
  return out;
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
        auto r = Format(s, a);
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
        for (const auto& [k, v] : d) l.push_back(Value::MakeList({Value::Str(k), v}));
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
      "strip", "lstrip",     "rstrip",  "split",   "startswith", "endswith",  "lower", "upper",
      "title", "capitalize", "replace", "format",  "join",       "count",     "find",  "rfind",
      "index", "isdigit",    "isalpha", "isspace", "isalnum",    "splitlines"};
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
    case K::kDict:
      if (const Value* x = Find(*v.dict, ToStr(key))) return *x;
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
      "defined", "undefined",   "none",     "string",  "mapping", "iterable", "sequence",
      "number",  "integer",     "float",    "boolean", "true",    "false",    "equalto",
      "eq",      "==",          "ne",       "!=",      "lt",      "<",        "gt",
      ">",       "le",          "<=",       "ge",      ">=",      "in",       "odd",
      "even",    "divisibleby", "callable", "lower",   "upper",   "sameas"};
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
  if (n == "lt" || n == "<") return *c < 0;
  if (n == "gt" || n == ">") return *c > 0;
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
    for (const auto& [k, x] : *v.dict) l.push_back(Value::MakeList({Value::Str(k), x}));
    return Value::MakeList(std::move(l));
  }
  if (n == "tojson") {
    auto indent = args.Take(0, "indent");
    if (v.undefined()) return UndefinedError(v);
    std::optional<int> ind;
    if (indent && !indent->none()) ind = static_cast<int>(indent->i);
    auto j = ToJson(v, ind);
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
    List out;
    for (const Value& x : *items) {
      if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return Equal(x, y); })) {
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
    if (v.kind == K::kInt) return v;
    if (v.kind == K::kFloat) return Value::Int(static_cast<int64_t>(v.f));
    if (v.kind == K::kBool) return Value::Int(v.b);
    char* end = nullptr;
    const long long x = std::strtoll(ToStr(v).c_str(), &end, 10);
    return Value::Int(end != nullptr && *end == 0 ? x : 0);
  }
  if (n == "float") {
    if (v.is_number() || v.kind == K::kBool) return Value::Float(v.number());
    return Value::Float(std::strtod(ToStr(v).c_str(), nullptr));
  }
  if (n == "abs") {
    if (v.kind == K::kInt) return Value::Int(v.i < 0 ? -v.i : v.i);
    return Value::Float(std::fabs(v.number()));
  }
  if (n == "round") {
    auto precision = args.Take(0, "precision");
    const double p = std::pow(10.0, precision ? static_cast<double>(precision->i) : 0.0);
    return Value::Float(std::round(v.number() * p) / p);
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
                     if (p.kind == K::kDict) v.ns->attrs = *p.dict;
                   }
                   for (auto& [k, x] : a.kw) v.ns->attrs.emplace_back(k, x);
                   return v;
                 }));
  g.emplace_back("dict", Value::MakeFunction([](Args& a) -> absl::StatusOr<Value> {
                   Dict d;
                   for (auto& [k, x] : a.kw) d.emplace_back(k, x);
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
