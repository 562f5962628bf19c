// jinja2's filters as chat templates use them (`x | name(args)`), with jinja2's semantics on
// Python values; HasFilter and ApplyFilter (jinja_builtins.h).
#include <algorithm>
#include <cmath>
#include <iterator>
#include <set>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "worker/frontend/chat/jinja_builtins.h"
#include "worker/frontend/chat/jinja_format.h"
#include "worker/frontend/chat/python_str.h"

namespace llm::frontend::jinja {

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

using K = Value::Kind;

absl::Status Error(const std::string& what) { return absl::InvalidArgumentError(what); }

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

// The key of unique, min and max (case_sensitive=False, attribute=None): an item's attribute
// (or the item), as SortKey has it.
struct ItemKey {
  std::optional<Value> attribute;
  bool case_sensitive;
  Value operator()(const Value& x) const {
    return SortKey(attribute ? GetAttr(x, ToStr(*attribute)).value_or(Value()) : x, case_sensitive);
  }
};
ItemKey TakeItemKey(Args& args) {
  auto case_sensitive = args.Take(0, "case_sensitive");
  return {args.Take(1, "attribute"), case_sensitive && Truthy(*case_sensitive)};
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
    const ItemKey key = TakeItemKey(args);
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
    const ItemKey key = TakeItemKey(args);
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
    auto strip = GetAttr(Value::Str(ToStr(v)), "strip");  // str.strip, bound to the text
    if (!strip.ok()) return strip.status();
    return (*strip->fn)(strip_args);
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

}  // namespace llm::frontend::jinja
