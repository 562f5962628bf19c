#include "worker/frontend/chat/jinja_builtins.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <iterator>
#include <set>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "worker/frontend/chat/jinja_format.h"
#include "worker/frontend/chat/python_str.h"

namespace llm::frontend::jinja {

namespace {

using K = Value::Kind;

// Whether s.replace(old, with) stays within kMaxBuiltBytes with every occurrence replaced.
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

absl::Status Error(const std::string& what) { return absl::InvalidArgumentError(what); }

// The undefined value's own message when an operation needs a defined one.
absl::Status UndefinedError(const Value& v) {
  return Error(v.s.empty() ? "a value is undefined" : v.s);
}

// Python's ints have no bound; ours are 64 bits: past them is an error, never a wrapped number
// (as for the operators).
absl::Status IntOverflowError(const std::string& what) {
  return Error(absl::StrCat("integer overflow in ", what, ": the result does not fit in 64 bits"));
}

// An int argument: Python takes a bool as an int too.
std::optional<int64_t> AsInt(const Value& v) {
  if (v.kind == K::kInt) return v.i;
  if (v.kind == K::kBool) return v.b ? 1 : 0;
  return std::nullopt;
}

Value StrList(const Parts& parts) {
  List l;
  for (const auto& p : parts) l.push_back(Value::Str(Encode(p)));
  return Value::MakeList(std::move(l));
}

// jinja2's indent(s, width=4, first=False, blank=False): the lines of s + "\n" (as
// str.splitlines cuts them) joined by "\n"; each line after the first indented unless it is
// empty (`blank`: empty ones too), and the first one with `first`.
std::string Indent(const std::string& s, const std::string& indent, bool first, bool blank) {
  const Parts lines = SplitLines(Decode(s + "\n"), /*keepends=*/false);
  std::string out = Encode(lines[0]);
  for (size_t i = 1; i < lines.size(); ++i) {
    out += "\n";
    if (blank || !lines[i].empty()) out += indent;
    out += Encode(lines[i]);
  }
  return first ? indent + out : out;
}

// int(x) of a finite float: toward zero.
absl::StatusOr<Value> FloatToInt(double x) {
  if (!(x >= -0x1p63 && x < 0x1p63)) {
    return IntOverflowError("int");
  }
  return Value::Int(static_cast<int64_t>(std::trunc(x)));
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
    case K::kString: {
      const std::optional<std::string> text = NumericText(v.s);
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

// ---- String methods ----

// The start and end arguments of find, count, startswith...: as in s[start:end], negative ones
// count from the end and both are clamped to [0, len], except that a start past the end stays
// (Python then finds nothing, not even "").
struct Window {
  int64_t start, end;
};
absl::StatusOr<Window> WindowArgs(Args& a, size_t first_index, int64_t len,
                                  const std::string& method) {
  Window w = {0, len};
  int64_t* bounds[] = {&w.start, &w.end};
  for (size_t k = 0; k < 2; ++k) {
    const std::optional<Value> arg = a.Take(first_index + k, k == 0 ? "start" : "end");
    if (!arg || arg->none()) continue;
    const std::optional<int64_t> x = AsInt(*arg);
    if (!x) {
      return Error(
          absl::StrCat(method, "(): slice indices must be integers or None, not ", TypeName(*arg)));
    }
    *bounds[k] = *x < 0 ? std::max<int64_t>(0, *x + len) : *x;
  }
  w.end = std::min(w.end, len);
  return w;
}

// The str argument of a method, decoded (Python raises TypeError for anything else).
absl::StatusOr<std::u32string> StrArg(const std::optional<Value>& arg, const std::string& method) {
  if (!arg) return Error(absl::StrCat(method, "() takes at least 1 argument"));
  if (!arg->is_string()) {
    return Error(absl::StrCat(method, "(): must be str, not ", TypeName(*arg)));
  }
  return Decode(arg->s);
}

// str.startswith / str.endswith(affix, start=None, end=None): `affix` is a str or a tuple of str,
// tried in order (an item that is not a str is an error only if no earlier one matched).
absl::StatusOr<Value> AffixMethod(const std::string& s, const std::string& name, Args& a) {
  const std::optional<Value> arg = a.Take(0, "prefix");
  if (!arg) return Error(name + "() takes at least 1 argument");
  const std::u32string text = Decode(s);
  absl::StatusOr<Window> w = WindowArgs(a, 1, static_cast<int64_t>(text.size()), name);
  if (!w.ok()) return w.status();
  const bool tuple = arg->kind == K::kList && arg->tuple;
  for (const Value& x : tuple ? *arg->list : List{*arg}) {
    if (!x.is_string()) {
      return Error(
          tuple ? absl::StrCat("tuple for ", name, "() must only contain str, not ", TypeName(x))
                : absl::StrCat(name, "() first arg must be str or a tuple of str, not ",
                               TypeName(x)));
    }
    const std::u32string affix = Decode(x.s);
    const auto n = static_cast<int64_t>(affix.size());
    if (w->end - w->start < n) continue;
    const int64_t at = name == "startswith" ? w->start : w->end - n;
    if (text.compare(static_cast<size_t>(at), affix.size(), affix) == 0) return Value::Bool(true);
  }
  return Value::Bool(false);
}

// str.find / rfind / index / rindex / count(sub, start=None, end=None), in code points.
absl::StatusOr<Value> SearchMethod(const std::string& s, const std::string& name, Args& a) {
  absl::StatusOr<std::u32string> sub = StrArg(a.Take(0, "sub"), name);
  if (!sub.ok()) return sub.status();
  const std::u32string text = Decode(s);
  absl::StatusOr<Window> w = WindowArgs(a, 1, static_cast<int64_t>(text.size()), name);
  if (!w.ok()) return w.status();
  const bool fits = w->end - w->start >= static_cast<int64_t>(sub->size());
  const std::u32string_view window =
      fits ? std::u32string_view(text).substr(static_cast<size_t>(w->start),
                                              static_cast<size_t>(w->end - w->start))
           : std::u32string_view();
  if (name == "count") {
    if (!fits) return Value::Int(0);
    if (sub->empty()) return Value::Int(static_cast<int64_t>(window.size()) + 1);
    int64_t n = 0;
    for (size_t at = window.find(*sub); at != window.npos;
         at = window.find(*sub, at + sub->size())) {
      ++n;
    }
    return Value::Int(n);
  }
  size_t at = window.npos;
  if (fits) at = name == "find" || name == "index" ? window.find(*sub) : window.rfind(*sub);
  if (at != window.npos) return Value::Int(w->start + static_cast<int64_t>(at));
  if (name == "index" || name == "rindex") return Error(name + "(): substring not found");
  return Value::Int(-1);
}

// str.split / str.rsplit(sep=None, maxsplit=-1).
absl::StatusOr<Value> SplitMethod(const std::string& s, const std::string& name, Args& a) {
  const std::optional<Value> sep = a.Take(0, "sep");
  const std::optional<Value> max = a.Take(1, "maxsplit");
  const std::optional<int64_t> maxsplit = max ? AsInt(*max) : -1;
  if (!maxsplit) {
    return Error(absl::StrCat(name, "(): maxsplit must be an integer, not ", TypeName(*max)));
  }
  const std::u32string text = Decode(s);
  const bool right = name == "rsplit";
  if (!sep || sep->none()) {
    return StrList(right ? RSplitWhitespace(text, *maxsplit) : SplitWhitespace(text, *maxsplit));
  }
  if (!sep->is_string()) {
    return Error(absl::StrCat(name, "(): the separator must be str or None, not ", TypeName(*sep)));
  }
  if (sep->s.empty()) return Error(name + "(): empty separator");
  const std::u32string d = Decode(sep->s);
  return StrList(right ? RSplitOn(text, d, *maxsplit) : SplitOn(text, d, *maxsplit));
}

// str.strip / lstrip / rstrip(chars=None).
absl::StatusOr<Value> StripMethod(const std::string& s, const std::string& name, Args& a) {
  const std::optional<Value> chars = a.Take(0, "chars");
  std::optional<std::u32string> set;
  if (chars && !chars->none()) {
    if (!chars->is_string()) {
      return Error(absl::StrCat(name, "() arg must be None or str, not ", TypeName(*chars)));
    }
    set = Decode(chars->s);
  }
  return Value::Str(Strip(s, set, name != "rstrip", name != "lstrip"));
}

// str.isalpha, isdigit, ... by name; null for another name.
bool (*ClassOf(const std::string& name))(char32_t) {
  if (name == "isalpha") return IsAlpha;
  if (name == "isalnum") return IsAlnum;
  if (name == "isdigit") return IsDigit;
  if (name == "isdecimal") return IsDecimal;
  if (name == "isspace") return IsSpace;
  return nullptr;
}

// A string's method `name` (one IsStringMethod lists) called with `a`.
absl::StatusOr<Value> StrMethod(const std::string& s, const std::string& name, Args& a) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") return StripMethod(s, name, a);
  if (name == "split" || name == "rsplit") return SplitMethod(s, name, a);
  if (name == "startswith" || name == "endswith") return AffixMethod(s, name, a);
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return SearchMethod(s, name, a);
  }
  if (name == "lower") return Value::Str(Lower(s));
  if (name == "upper") return Value::Str(Upper(s));
  if (name == "title") return Value::Str(Title(s));
  if (name == "capitalize") return Value::Str(Capitalize(s));
  if (auto in_class = ClassOf(name)) return Value::Bool(AllIn(s, in_class));
  if (name == "isupper" || name == "islower") return Value::Bool(HasOnlyCase(s, name == "isupper"));
  if (name == "splitlines") {
    const std::optional<Value> keepends = a.Take(0, "keepends");
    return StrList(SplitLines(Decode(s), keepends && Truthy(*keepends)));
  }
  if (name == "replace") {
    auto o = a.Take(0, "old"), w = a.Take(1, "new"), c = a.Take(2, "count");
    if (!o || !w) return Error("replace() takes at least 2 arguments");
    if (!ReplaceFits(s, o->s, w->s)) return TooLong("replace()");
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
      if (out.size() > kMaxBuiltBytes) return TooLong("join()");
    }
    return Value::Str(out);
  }
  if (name == "zfill") {
    auto width = a.Take(0, "width");
    const auto n = static_cast<int64_t>(CodePoints(s).size());
    if (!width || width->i <= n) return Value::Str(s);
    if (width->i > static_cast<int64_t>(kMaxBuiltBytes)) return TooLong("zfill()");
    const size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
    return Value::Str(s.substr(0, sign) + std::string(static_cast<size_t>(width->i - n), '0') +
                      s.substr(sign));
  }
  return Error(absl::StrCat("'str' object has no method '", name, "'"));
}

// A bound method of a string or dict.
Value Method(const Value& self, const std::string& name) {
  return Value::MakeFunction([self, name](Args& a) -> absl::StatusOr<Value> {
    if (self.is_string()) return StrMethod(self.s, name, a);
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
      "strip",     "lstrip",  "rstrip",  "split",   "rsplit",     "splitlines", "startswith",
      "endswith",  "lower",   "upper",   "title",   "capitalize", "replace",    "format",
      "join",      "count",   "find",    "rfind",   "index",      "rindex",     "isdigit",
      "isdecimal", "isalpha", "isalnum", "isspace", "isupper",    "islower",    "zfill"};
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
  // jinja2: str(value).islower() / .isupper(), which need a cased character ("123" is neither).
  if (n == "lower" || n == "upper") return HasOnlyCase(ToStr(v), n == "upper");
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

// jinja2's ignore_case: a string sort key is lowercased unless the sort is case-sensitive.
Value SortKey(Value key, bool case_sensitive) {
  if (key.is_string() && !case_sensitive) key.s = Lower(key.s);
  return key;
}

// Orders `items` by `keys` (one each) as Python's sorted(): stably, with `reverse` too; an error
// for keys Python cannot order. `keys_are_lists`: each key is a list, compared as Python compares
// lists: at the first items that differ by ==, so items equal but without an order (None,
// undefined) still sort.
absl::Status SortByKeys(const List& keys, bool reverse, bool keys_are_lists, List* items) {
  const auto compare = [keys_are_lists](const Value& a, const Value& b) -> absl::StatusOr<int> {
    if (!keys_are_lists) return Compare(a, b);
    const List &x = *a.list, &y = *b.list;
    size_t i = 0;
    while (i < x.size() && i < y.size() && Equal(x[i], y[i])) ++i;
    if (i < x.size() && i < y.size()) return Compare(x[i], y[i]);
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  };
  std::vector<size_t> order(items->size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  absl::Status st;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (!st.ok()) return false;
    absl::StatusOr<int> c = compare(keys[a], keys[b]);
    if (!c.ok()) {
      st = c.status();
      return false;
    }
    return reverse ? *c > 0 : *c < 0;
  });
  if (!st.ok()) return st;
  List sorted;
  for (const size_t i : order) sorted.push_back((*items)[i]);
  *items = std::move(sorted);
  return absl::OkStatus();
}

// jinja2's attribute paths of sort: comma-separated, each dot-separated, its all-digit parts
// indices ("name", "a.b,c", "items.0"); an attribute that is not a string is one index.
absl::StatusOr<std::vector<std::vector<Value>>> AttributePaths(const std::optional<Value>& attr) {
  std::vector<std::vector<Value>> paths;
  if (!attr || attr->none()) return paths;
  if (!attr->is_string()) return std::vector<std::vector<Value>>{{*attr}};
  for (const std::u32string& path : SplitOn(Decode(attr->s), U",", -1)) {
    std::vector<Value> parts;
    for (const std::u32string& part : SplitOn(path, U".", -1)) {
      const std::string text = Encode(part);
      if (!AllIn(text, IsDigit)) {
        parts.push_back(Value::Str(text));
        continue;
      }
      absl::StatusOr<int64_t> index = ParseInt(NumericText(text).value_or(""), 10);
      if (!index.ok()) return Error(absl::StrCat("sort: bad attribute index '", text, "'"));
      parts.push_back(Value::Int(*index));
    }
    paths.push_back(std::move(parts));
  }
  return paths;
}

// jinja2's sort(value, reverse=False, case_sensitive=False, attribute=None): sorted by the list
// of the values at the attribute paths (the item itself without any), strings lowercased unless
// case_sensitive.
absl::StatusOr<Value> SortFilter(const Value& v, Args& args) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  auto reverse = args.Take(0, "reverse");
  auto case_sensitive = args.Take(1, "case_sensitive");
  auto paths = AttributePaths(args.Take(2, "attribute"));
  if (!paths.ok()) return paths.status();
  const bool cs = case_sensitive && Truthy(*case_sensitive);
  List keys;
  for (const Value& x : *items) {
    List key;
    for (const std::vector<Value>& path : *paths) {
      Value at = x;
      for (const Value& part : path) {
        auto next = GetItem(at, part);
        if (!next.ok()) return next.status();
        at = *std::move(next);
      }
      key.push_back(SortKey(std::move(at), cs));
    }
    if (paths->empty()) key.push_back(SortKey(x, cs));
    keys.push_back(Value::MakeList(std::move(key)));
  }
  if (absl::Status st = SortByKeys(keys, reverse && Truthy(*reverse), true, &*items); !st.ok()) {
    return st;
  }
  return Value::MakeList(*std::move(items));
}

// jinja2's dictsort(value, case_sensitive=False, by="key", reverse=False): the (key, value)
// pairs of a dict, sorted by key or by value.
absl::StatusOr<Value> DictSortFilter(const Value& v, Args& args) {
  if (v.undefined()) return UndefinedError(v);
  if (v.kind != K::kDict) {
    return Error(absl::StrCat("dictsort: expected a mapping, got ", TypeName(v)));
  }
  auto case_sensitive = args.Take(0, "case_sensitive");
  auto by = args.Take(1, "by");
  auto reverse = args.Take(2, "reverse");
  const std::string by_what = by ? ToStr(*by) : "key";
  if (by_what != "key" && by_what != "value") {
    return Error("dictsort: you can only sort by either \"key\" or \"value\"");
  }
  List pairs, keys;
  for (const auto& [k, x] : *v.dict) {
    pairs.push_back(Value::MakeList({Value::Str(k), x}, /*tuple=*/true));
    keys.push_back(
        SortKey(by_what == "key" ? Value::Str(k) : x, case_sensitive && Truthy(*case_sensitive)));
  }
  if (absl::Status st = SortByKeys(keys, reverse && Truthy(*reverse), false, &pairs); !st.ok()) {
    return st;
  }
  return Value::MakeList(std::move(pairs));
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
      if (out.size() > kMaxBuiltBytes) return TooLong("join");
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
  if (n == "sort") return SortFilter(v, args);
  if (n == "dictsort") return DictSortFilter(v, args);
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
          int64_t sum = 0;
          if (__builtin_add_overflow(*AsInt(total), *AsInt(y), &sum)) {
            return IntOverflowError("sum");
          }
          total = Value::Int(sum);
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
  // jinja2 prints an undefined value as "" where a filter only reads its text.
  if (n == "trim") {
    Args strip_args;
    if (auto chars = args.Take(0, "chars")) strip_args.pos.push_back(*chars);
    return StripMethod(ToStr(v), "strip", strip_args);
  }
  if (n == "lower") return Value::Str(Lower(ToStr(v)));
  if (n == "upper") return Value::Str(Upper(ToStr(v)));
  if (n == "capitalize") return Value::Str(Capitalize(ToStr(v)));
  if (n == "title") return Value::Str(TitleFilter(ToStr(v)));
  if (n == "wordcount") return Value::Int(WordCount(ToStr(v)));
  if (n == "e" || n == "escape") return Value::Str(Escape(ToStr(v)));
  if (n == "int") return IntFilter(v, args);
  if (n == "float") return FloatFilter(v, args);
  if (v.undefined() && n != "replace") return UndefinedError(v);
  if (n == "indent") {
    auto width = args.Take(0, "width");
    auto first = args.Take(1, "first");
    auto blank = args.Take(2, "blank");
    std::string indent = "    ";
    if (width && width->is_string()) {
      indent = width->s;
    } else if (width) {
      const std::optional<int64_t> w = AsInt(*width);
      if (!w)
        return Error(
            absl::StrCat("indent: width must be a string or an int, not ", TypeName(*width)));
      if (*w > static_cast<int64_t>(kMaxBuiltBytes)) return TooLong("indent");
      indent = std::string(static_cast<size_t>(std::max<int64_t>(0, *w)), ' ');
    }
    const std::string text = ToStr(v);
    // One indent per line at most.
    const size_t lines = SplitLines(Decode(text + "\n"), /*keepends=*/false).size();
    if (text.size() + lines * indent.size() > kMaxBuiltBytes) return TooLong("indent");
    return Value::Str(Indent(text, indent, first && Truthy(*first), blank && Truthy(*blank)));
  }
  if (n == "replace") {
    auto o = args.Take(0, "old"), w = args.Take(1, "new"), c = args.Take(2, "count");
    if (!o || !w) return Error("replace: takes old and new");
    const std::string text = ToStr(v), old = ToStr(*o), with = ToStr(*w);
    if (!ReplaceFits(text, old, with)) return TooLong("replace");
    return Value::Str(Replace(text, old, with, c && !c->none() ? c->i : -1));
  }
  if (n == "abs") {
    if (v.kind == K::kInt || v.kind == K::kBool) {
      const int64_t i = *AsInt(v);
      if (i == INT64_MIN) return IntOverflowError("abs");
      return Value::Int(i < 0 ? -i : i);
    }
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
        int64_t rounded = 0;
        if (__builtin_mul_overflow(q, m, &rounded)) return IntOverflowError("round");
        return Value::Int(rounded);
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
  return Error(absl::StrCat("the filter '", n, "' is not supported"));
}

// ---- Globals ----

Dict Globals(const std::string& today) {
  Dict g;
  g.emplace_back("range", Value::MakeFunction([](Args& a) -> absl::StatusOr<Value> {
                   std::vector<int64_t> ints;  // range(stop) or range(start, stop[, step])
                   for (const Value& x : a.pos) {
                     const std::optional<int64_t> i = AsInt(x);
                     if (!i) {
                       return Error(absl::StrCat("'", TypeName(x),
                                                 "' object cannot be interpreted as an integer"));
                     }
                     ints.push_back(*i);
                   }
                   if (ints.empty() || ints.size() > 3) {
                     return Error("range() takes 1 to 3 arguments");
                   }
                   const int64_t start = ints.size() == 1 ? 0 : ints[0];
                   const int64_t stop = ints.size() == 1 ? ints[0] : ints[1];
                   const int64_t step = ints.size() == 3 ? ints[2] : 1;
                   if (step == 0) return Error("range() arg 3 must not be zero");
                   List l;
                   for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
                     if (l.size() >= 100000)
                       return absl::ResourceExhaustedError("range(): too long");
                     l.push_back(Value::Int(i));
                     if (__builtin_add_overflow(i, step, &i)) break;  // past any stop
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
