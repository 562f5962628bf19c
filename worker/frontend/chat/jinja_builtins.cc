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

absl::Status Error(const std::string& what) { return absl::InvalidArgumentError(what); }

Value StrList(const Parts& parts) {
  List l;
  for (const auto& p : parts) l.push_back(Value::Str(Encode(p)));
  return Value::MakeList(std::move(l));
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
    case K::kList:
      if (v.group && (name == "grouper" || name == "list")) {
        return (*v.list)[name == "grouper" ? 0 : 1];
      }
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
      "!=",       "<",        "<=",          "==",       ">",           ">=",       "boolean",
      "callable", "defined",  "divisibleby", "eq",       "equalto",     "escaped",  "even",
      "false",    "filter",   "float",       "ge",       "greaterthan", "gt",       "in",
      "integer",  "iterable", "le",          "lessthan", "lower",       "lt",       "mapping",
      "ne",       "none",     "number",      "odd",      "sameas",      "sequence", "string",
      "test",     "true",     "undefined",   "upper"};
  return kNames.count(n) > 0;
}

namespace {

// Python's `value % divisor` for the odd, even and divisibleby tests (numbers only).
absl::StatusOr<double> Modulo(const std::string& test, const Value& v, const Value& divisor) {
  if (v.undefined()) return UndefinedError(v);
  const auto number = [](const Value& x) { return x.is_number() || x.kind == K::kBool; };
  if (!number(v) || !number(divisor)) {
    return Error(absl::StrCat(test, ": unsupported operand type(s) for %: '", TypeName(v),
                              "' and '", TypeName(divisor), "'"));
  }
  if (v.kind != K::kFloat && divisor.kind != K::kFloat) {
    const int64_t a = *AsInt(v), b = *AsInt(divisor);
    if (b == 0) return Error(absl::StrCat(test, ": integer modulo by zero"));
    if (b == -1) return 0;  // INT64_MIN % -1 traps in C++
    const int64_t r = a % b;
    return static_cast<double>(r != 0 && (r < 0) != (b < 0) ? r + b : r);
  }
  const double a = v.number(), b = divisor.number();
  if (b == 0) return Error(absl::StrCat(test, ": float modulo"));
  const double r = std::fmod(a, b);
  return r != 0 && (r < 0) != (b < 0) ? r + b : r;
}

// jinja2's `value is in seq`: Python's `value in seq`.
absl::StatusOr<bool> In(const Value& v, const Value& seq) {
  switch (seq.kind) {
    case K::kList:
      return std::any_of(seq.list->begin(), seq.list->end(),
                         [&v](const Value& x) { return Equal(v, x); });
    case K::kString:
      if (!v.is_string()) {
        return Error(
            absl::StrCat("'in <string>' requires string as left operand, not ", TypeName(v)));
      }
      return seq.s.find(v.s) != std::string::npos;
    case K::kDict:
      if (v.kind == K::kList || v.kind == K::kDict) {
        return Error(absl::StrCat("unhashable type: '", TypeName(v), "'"));
      }
      return v.is_string() && Find(*seq.dict, v.s) != nullptr;
    case K::kUndefined:
      return false;
    default:
      return Error(absl::StrCat("argument of type '", TypeName(seq), "' is not iterable"));
  }
}

// jinja2's `value is sameas other`: Python's `is`. Lists, dicts, namespaces and functions are the
// same object when they share their storage; an undefined value is no other; scalars are the
// same when equal and of one type (Python shares small ints, None, booleans and a template's
// equal constants).
bool SameAs(const Value& a, const Value& b) {
  if (a.kind != b.kind || a.undefined()) return false;
  switch (a.kind) {
    case K::kList:
      return a.list == b.list;
    case K::kDict:
      return a.dict == b.dict;
    case K::kNamespace:
      return a.ns == b.ns;
    case K::kFunction:
      return a.fn == b.fn;
    default:
      return Equal(a, b);
  }
}

}  // namespace

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
  // hasattr(value, "__html__"): a Markup string.
  if (n == "escaped") return v.is_string() && v.markup;
  // The name of a filter or test of the environment.
  if (n == "filter") return v.is_string() && HasFilter(v.s);
  if (n == "test") return v.is_string() && HasTest(v.s);
  // jinja2: str(value).islower() / .isupper(), which need a cased character ("123" is neither).
  if (n == "lower" || n == "upper") return HasOnlyCase(ToStr(v), n == "upper");
  if (n == "odd" || n == "even") {
    absl::StatusOr<double> r = Modulo(n, v, Value::Int(2));
    if (!r.ok()) return r.status();
    return *r == (n == "odd" ? 1 : 0);
  }
  auto other = args.Take(0, "other");
  if (!other) return Error(absl::StrCat("test '", n, "' takes an argument"));
  if (n == "equalto" || n == "eq" || n == "==") return Equal(v, *other);
  if (n == "ne" || n == "!=") return !Equal(v, *other);
  if (n == "sameas") return SameAs(v, *other);
  if (n == "divisibleby") {
    absl::StatusOr<double> r = Modulo(n, v, *other);
    if (!r.ok()) return r.status();
    return *r == 0;
  }
  if (n == "in") return In(v, *other);
  auto c = Compare(v, *other);
  if (!c.ok()) return c.status();
  if (n == "lt" || n == "<" || n == "lessthan") return *c < 0;
  if (n == "gt" || n == ">" || n == "greaterthan") return *c > 0;
  if (n == "le" || n == "<=") return *c <= 0;
  return *c >= 0;
}

// ---- Globals ----

namespace {

// range(stop) or range(start, stop[, step]), at most 100000 items.
absl::StatusOr<Value> Range(Args& a) {
  std::vector<int64_t> ints;
  for (const Value& x : a.pos) {
    const std::optional<int64_t> i = AsInt(x);
    if (!i) {
      return Error(absl::StrCat("'", TypeName(x), "' object cannot be interpreted as an integer"));
    }
    ints.push_back(*i);
  }
  if (ints.empty() || ints.size() > 3) return Error("range() takes 1 to 3 arguments");
  const int64_t start = ints.size() == 1 ? 0 : ints[0];
  const int64_t stop = ints.size() == 1 ? ints[0] : ints[1];
  const int64_t step = ints.size() == 3 ? ints[2] : 1;
  if (step == 0) return Error("range() arg 3 must not be zero");
  List l;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    if (l.size() >= 100000) return absl::ResourceExhaustedError("range(): too long");
    l.push_back(Value::Int(i));
    if (__builtin_add_overflow(i, step, &i)) break;  // past any stop
  }
  return Value::MakeList(std::move(l));
}

// namespace(mapping, **kwargs): a mutable attribute holder.
absl::StatusOr<Value> MakeNamespace(Args& a) {
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
}

// dict(mapping_or_pairs, **kwargs); later keys replace earlier ones.
absl::StatusOr<Value> MakeDict(Args& a) {
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
}

// raise_exception(message): the render fails with the template's message, marked as raised.
absl::StatusOr<Value> RaiseException(Args& a) {
  absl::Status st = absl::InvalidArgumentError(
      absl::StrCat("chat template raised: ", a.pos.empty() ? std::string() : ToStr(a.pos[0])));
  st.SetPayload(kRaisedPayload, absl::Cord("1"));
  return st;
}

// strftime_now(format): the local time now, or noon of `today` ("YYYY-MM-DD") when set.
absl::StatusOr<Value> StrftimeNow(const std::string& today, Args& a) {
  std::tm tm{};
  if (!today.empty()) {
    tm.tm_year = std::atoi(today.substr(0, 4).c_str()) - 1900;
    tm.tm_mon = std::atoi(today.substr(5, 2).c_str()) - 1;
    tm.tm_mday = std::atoi(today.substr(8, 2).c_str());
    tm.tm_hour = 12;
    std::tm copy = tm;
    const std::time_t t = std::mktime(&copy);  // fills the weekday and day of the year
    localtime_r(&t, &tm);
  } else {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &tm);
  }
  char buf[256];
  const std::string fmt = a.pos.empty() ? "" : ToStr(a.pos[0]);
  const size_t n = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
  return Value::Str(std::string(buf, n));
}

}  // namespace

Dict Globals(const std::string& today) {
  Dict g;
  g.emplace_back("range", Value::MakeFunction(Range));
  g.emplace_back("namespace", Value::MakeFunction(MakeNamespace));
  g.emplace_back("dict", Value::MakeFunction(MakeDict));
  g.emplace_back("raise_exception", Value::MakeFunction(RaiseException));
  g.emplace_back("strftime_now",
                 Value::MakeFunction([today](Args& a) { return StrftimeNow(today, a); }));
  return g;
}

}  // namespace llm::frontend::jinja
