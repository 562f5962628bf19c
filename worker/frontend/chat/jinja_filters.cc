// jinja2 3.1's builtin filters (`x | name(args)`), with jinja2's semantics on Python values;
// HasFilter and ApplyFilter (jinja_builtins.h). Those that lay out or encode text hold their
// algorithms in jinja_text_filters.h, and the numeric ones are in jinja_number_filters.h. Filters
// that return a generator in jinja2 (map, select, batch, slice...) return a list.
#include <algorithm>
#include <iterator>
#include <set>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "worker/frontend/chat/jinja_builtins.h"
#include "worker/frontend/chat/jinja_format.h"
#include "worker/frontend/chat/jinja_number_filters.h"
#include "worker/frontend/chat/jinja_text_filters.h"
#include "worker/frontend/chat/python_str.h"

namespace llm::frontend::jinja {

bool HasFilter(const std::string& n) {
  static const std::set<std::string> kNames = {
      "abs",    "attr",       "batch",       "capitalize", "center",   "count",
      "d",      "default",    "dictsort",    "e",          "escape",   "filesizeformat",
      "first",  "float",      "forceescape", "format",     "groupby",  "indent",
      "int",    "items",      "join",        "last",       "length",   "list",
      "lower",  "map",        "max",         "min",        "pprint",   "random",
      "reject", "rejectattr", "replace",     "reverse",    "round",    "safe",
      "select", "selectattr", "slice",       "sort",       "string",   "striptags",
      "sum",    "title",      "tojson",      "trim",       "truncate", "unique",
      "upper",  "urlencode",  "urlize",      "wordcount",  "wordwrap", "xmlattr"};
  return kNames.count(n) > 0;
}

namespace {

using K = Value::Kind;

// jinja2's filters without a meaning here: random (not deterministic) and urlize (HTML links
// by a large set of URL and e-mail rules). They exist, so that `'random' is filter` holds and a
// template that never applies them renders, but applying one is an error naming it.
const char* UnsupportedFilterReason(const std::string& n) {
  if (n == "random") return "its choice is not deterministic";
  if (n == "urlize") return "its URL and e-mail rules are not implemented";
  return nullptr;
}

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

// jinja2's attribute paths of sort: comma-separated (if `several`, as sort takes them), each
// dot-separated, its all-digit parts indices ("name", "a.b,c", "items.0"); an attribute that is
// not a string is one index.
absl::StatusOr<std::vector<std::vector<Value>>> AttributePaths(const std::optional<Value>& attr,
                                                               bool several = true) {
  std::vector<std::vector<Value>> paths;
  if (!attr || attr->none()) return paths;
  if (!attr->is_string()) return std::vector<std::vector<Value>>{{*attr}};
  const std::u32string text = Decode(attr->s);
  for (const std::u32string& path : several ? SplitOn(text, U",", -1) : Parts{text}) {
    std::vector<Value> parts;
    for (const std::u32string& part : SplitOn(path, U".", -1)) {
      const std::string name = Encode(part);
      if (!AllIn(name, IsDigit)) {
        parts.push_back(Value::Str(name));
        continue;
      }
      absl::StatusOr<int64_t> index = ParseInt(NumericText(name).value_or(""), 10);
      if (!index.ok()) return Error(absl::StrCat("bad attribute index '", name, "'"));
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

// jinja2's groupby(value, attribute, default=None, case_sensitive=False): the items sorted by
// the value at the attribute path (`default` where it is undefined; strings lowercased unless
// case_sensitive), then (grouper, list) tuples of the runs of equal keys; the grouper is the
// first item's own value.
absl::StatusOr<Value> GroupByFilter(const Value& v, Args& args) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  auto attribute = args.Take(0, "attribute");
  auto def = args.Take(1, "default");
  auto case_sensitive = args.Take(2, "case_sensitive");
  if (!attribute) return Error("groupby: missing the attribute argument");
  auto paths = AttributePaths(attribute, /*several=*/false);
  if (!paths.ok()) return paths.status();
  const std::vector<Value> path = paths->empty() ? std::vector<Value>{} : paths->front();
  const bool cs = case_sensitive && Truthy(*case_sensitive);
  List values, keys;
  for (const Value& x : *items) {
    Value at = x;
    for (const Value& part : path) {
      auto next = GetItem(at, part);
      if (!next.ok()) return next.status();
      at = next->undefined() && def && !def->none() ? *def : *std::move(next);
    }
    values.push_back(at);
    keys.push_back(SortKey(std::move(at), cs));
  }
  // Python's sort compares every key when there are two or more; an undefined one raises.
  for (const Value& k : keys) {
    if (k.undefined() && keys.size() > 1) return UndefinedError(k);
  }
  List order;  // the indices, sorted by key
  for (size_t i = 0; i < items->size(); ++i) order.push_back(Value::Int(static_cast<int64_t>(i)));
  if (absl::Status st = SortByKeys(keys, false, false, &order); !st.ok()) return st;
  List groups;
  for (size_t i = 0; i < order.size();) {
    const auto first = static_cast<size_t>(order[i].i);
    List members;
    for (; i < order.size() && Equal(keys[static_cast<size_t>(order[i].i)], keys[first]); ++i) {
      members.push_back((*items)[static_cast<size_t>(order[i].i)]);
    }
    Value group = Value::MakeList({values[first], Value::MakeList(std::move(members))},
                                  /*tuple=*/true);
    group.group = true;
    groups.push_back(std::move(group));
  }
  return Value::MakeList(std::move(groups));
}

// The most lists slice makes and items batch pads to (range() has the same bound).
constexpr int64_t kMaxSlices = 100000;

// jinja2's slice(value, slices, fill_with=None): `slices` lists of consecutive items, the first
// len % slices of them one longer; `fill_with` pads the others.
absl::StatusOr<Value> SliceFilter(const Value& v, Args& args) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  auto slices_arg = args.Take(0, "slices");
  auto fill = args.Take(1, "fill_with");
  const std::optional<int64_t> slices = slices_arg ? AsInt(*slices_arg) : std::nullopt;
  if (!slices) {
    return Error(absl::StrCat("slice: unsupported operand type(s) for //: 'int' and '",
                              slices_arg ? TypeName(*slices_arg) : "NoneType", "'"));
  }
  if (*slices == 0) return Error("slice: integer division or modulo by zero");
  if (*slices > kMaxSlices) return absl::ResourceExhaustedError("slice: too many slices");
  const auto length = static_cast<int64_t>(items->size());
  // Python's // and % round toward negative infinity.
  int64_t per_slice = length / *slices, extra = length % *slices;
  if (extra != 0 && (extra < 0) != (*slices < 0)) {
    --per_slice;
    extra += *slices;
  }
  const auto clamp = [length](int64_t i) { return std::clamp<int64_t>(i, 0, length); };
  List out;
  int64_t offset = 0;
  for (int64_t n = 0; n < *slices; ++n) {
    const int64_t start = clamp(offset + n * per_slice);
    if (n < extra) ++offset;
    const int64_t end = clamp(offset + (n + 1) * per_slice);
    List slice(items->begin() + start, items->begin() + std::max(start, end));
    if (fill && !fill->none() && n >= extra) slice.push_back(*fill);
    out.push_back(Value::MakeList(std::move(slice)));
  }
  return Value::MakeList(std::move(out));
}

// jinja2's batch(value, linecount, fill_with=None): lists of `linecount` items, the last one
// padded with `fill_with` if given.
absl::StatusOr<Value> BatchFilter(const Value& v, Args& args) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  auto count_arg = args.Take(0, "linecount");
  auto fill = args.Take(1, "fill_with");
  const std::optional<int64_t> count = count_arg ? AsInt(*count_arg) : std::nullopt;
  if (!count) return Error("batch: linecount must be an integer");
  List out, batch;
  for (const Value& x : *items) {
    if (static_cast<int64_t>(batch.size()) == *count) {
      out.push_back(Value::MakeList(std::move(batch)));
      batch.clear();
    }
    batch.push_back(x);
  }
  if (!batch.empty()) {
    if (fill && !fill->none() && static_cast<int64_t>(batch.size()) < *count) {
      if (*count > kMaxSlices) return absl::ResourceExhaustedError("batch: linecount too large");
      batch.resize(static_cast<size_t>(*count), *fill);
    }
    out.push_back(Value::MakeList(std::move(batch)));
  }
  return Value::MakeList(std::move(out));
}

// jinja2's attr(obj, name): the attribute only, never the item ({'a': 1}|attr('a') is
// undefined); a dict's attributes are its safe methods.
absl::StatusOr<Value> AttrFilter(const Value& v, Args& args) {
  auto name = args.Take(0, "name");
  if (!name) return Error("attr: missing the name argument");
  const std::string n = ToStr(*name);
  if (v.kind == K::kDict && n != "items" && n != "keys" && n != "values" && n != "get") {
    return Value::Undefined(absl::StrCat("'dict object' has no attribute '", n, "'"));
  }
  return GetAttr(v, n);
}

// jinja2's format(value, *args, **kwargs): str(value) % args (a tuple) or % kwargs (a dict).
absl::StatusOr<Value> FormatFilter(const Value& v, Args& args) {
  if (!args.pos.empty() && !args.kw.empty()) {
    return Error("format: can't handle positional and keyword arguments at the same time");
  }
  const Value operand =
      args.kw.empty() ? Value::MakeList(args.pos, /*tuple=*/true) : Value::MakeDict(args.kw);
  auto r = PercentFormat(ToStr(v), operand);
  if (!r.ok()) return r.status();
  return Value::Str(*std::move(r));
}

// An optional int argument of a text filter, or an error naming the filter.
absl::StatusOr<int64_t> IntArg(const std::optional<Value>& arg, int64_t fallback,
                               const std::string& filter, const std::string& name) {
  if (!arg) return fallback;
  if (const std::optional<int64_t> i = AsInt(*arg)) return *i;
  return Error(absl::StrCat(filter, ": ", name, " must be an integer, not ", TypeName(*arg)));
}

// The filters of jinja_text_filters.h, with their arguments; none for another name.
std::optional<absl::StatusOr<Value>> TextFilter(const std::string& n, const Value& v, Args& args) {
  const auto str = [](absl::StatusOr<std::string> s) -> absl::StatusOr<Value> {
    if (!s.ok()) return s.status();
    return Value::Str(*std::move(s));
  };
  if (n == "e" || n == "escape") {
    return v.is_string() && v.markup ? v : Value::Markup(HtmlEscape(ToStr(v)));
  }
  if (n == "forceescape") return Value::Markup(HtmlEscape(ToStr(v)));
  if (n == "safe") return v.is_string() && v.markup ? v : Value::Markup(ToStr(v));
  if (n == "striptags") return Value::Str(StripTags(ToStr(v)));
  if (n == "urlencode") return str(UrlEncode(v));
  if (n == "xmlattr") {
    auto autospace = args.Take(0, "autospace");
    return str(XmlAttr(v, !autospace || Truthy(*autospace)));
  }
  if (n == "filesizeformat") {
    auto binary = args.Take(0, "binary");
    return str(FileSizeFormat(v, binary && Truthy(*binary)));
  }
  if (n == "pprint") return str(PrettyPrint(v));
  if (v.undefined() && n == "wordwrap") return UndefinedError(v);
  if (n == "center") {
    absl::StatusOr<int64_t> width = IntArg(args.Take(0, "width"), 80, n, "width");
    if (!width.ok()) return width.status();
    if (*width > static_cast<int64_t>(kMaxBuiltBytes)) return TooLong("center");
    return Value::Str(Center(ToStr(v), *width));
  }
  if (n == "truncate") {
    absl::StatusOr<int64_t> length = IntArg(args.Take(0, "length"), 255, n, "length");
    auto killwords = args.Take(1, "killwords");
    auto end = args.Take(2, "end");
    auto leeway_arg = args.Take(3, "leeway");
    absl::StatusOr<int64_t> leeway =
        IntArg(leeway_arg && leeway_arg->none() ? std::nullopt : leeway_arg, 5, n, "leeway");
    if (!length.ok()) return length.status();
    if (!leeway.ok()) return leeway.status();
    return str(Truncate(ToStr(v), *length, killwords && Truthy(*killwords),
                        end ? ToStr(*end) : "...", *leeway));
  }
  if (n == "wordwrap") {
    WrapOptions o;
    absl::StatusOr<int64_t> width = IntArg(args.Take(0, "width"), 79, n, "width");
    if (!width.ok()) return width.status();
    o.width = *width;
    if (auto b = args.Take(1, "break_long_words")) o.break_long_words = Truthy(*b);
    if (auto w = args.Take(2, "wrapstring"); w && !w->none()) o.wrapstring = ToStr(*w);
    if (auto b = args.Take(3, "break_on_hyphens")) o.break_on_hyphens = Truthy(*b);
    return str(WordWrap(ToStr(v), o));
  }
  return std::nullopt;
}

// jinja2's items(value): the (key, value) pairs of a mapping; none of an undefined value.
absl::StatusOr<Value> ItemsFilter(const Value& v) {
  if (v.undefined()) return Value::MakeList({});
  if (v.kind != K::kDict)
    return Error(absl::StrCat("items: expected a mapping, got ", TypeName(v)));
  List l;
  for (const auto& [k, x] : *v.dict) {
    l.push_back(Value::MakeList({Value::Str(k), x}, /*tuple=*/true));
  }
  return Value::MakeList(std::move(l));
}

// Hugging Face's tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False),
// which returns json.dumps(x, ...) with those arguments.
absl::StatusOr<Value> ToJsonFilter(const Value& v, Args& args) {
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

// jinja2's map(value, filter, *args) or map(value, attribute=, default=): the filter applied to
// each item, or each item's attribute.
absl::StatusOr<Value> MapFilter(const Value& v, Args& args) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  auto attr = args.Take(99, "attribute");
  auto def = args.Take(99, "default");
  if (items->empty()) return Value::MakeList({});  // jinja2 reads no argument then
  if (!attr && args.pos.empty()) return Error("map: needs a filter name or attribute=");
  Args rest;
  if (!attr) {
    if (!HasFilter(args.pos[0].s)) {
      return Error(absl::StrCat("No filter named '", args.pos[0].s, "'."));
    }
    rest.pos.assign(args.pos.begin() + 1, args.pos.end());
    rest.kw = args.kw;
  }
  List out;
  for (const Value& item : *items) {
    if (attr) {
      auto a = GetAttr(item, ToStr(*attr));
      if (!a.ok()) return a.status();
      out.push_back(a->undefined() && def ? *def : *a);
    } else {
      Args each = rest;  // a filter takes (consumes) its arguments
      auto r = ApplyFilter(args.pos[0].s, item, each);
      if (!r.ok()) return r.status();
      out.push_back(*r);
    }
  }
  return Value::MakeList(std::move(out));
}

// jinja2's join(value, d='', attribute=None).
absl::StatusOr<Value> JoinFilter(const Value& v, Args& args) {
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

// jinja2's reverse(value): a string's code points, or the items, in reverse order.
absl::StatusOr<Value> ReverseFilter(const Value& v) {
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

// jinja2's unique(value, case_sensitive=False, attribute=None): the first of each.
absl::StatusOr<Value> UniqueFilter(const Value& v, Args& args) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
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

// jinja2's sum(iterable, attribute=None, start=0), in int64 while both operands are ints.
absl::StatusOr<Value> SumFilter(const List& items, Args& args) {
  auto attr = args.Take(0, "attribute");
  auto start = args.Take(1, "start");
  Value total = start ? *start : Value::Int(0);
  for (const Value& x : items) {
    const Value y = attr ? GetAttr(x, ToStr(*attr)).value_or(Value()) : x;
    const bool nums =
        (total.is_number() || total.kind == K::kBool) && (y.is_number() || y.kind == K::kBool);
    if (!nums) {
      return Error(absl::StrCat("unsupported operand type(s) for +: '", TypeName(total), "' and '",
                                TypeName(y), "'"));
    }
    if (total.kind != K::kFloat && y.kind != K::kFloat) {
      int64_t sum = 0;
      if (__builtin_add_overflow(*AsInt(total), *AsInt(y), &sum)) return IntOverflowError("sum");
      total = Value::Int(sum);
    } else {
      total = Value::Float(total.number() + y.number());
    }
  }
  return total;
}

// jinja2's min/max(value, case_sensitive=False, attribute=None): the first extreme item.
absl::StatusOr<Value> ExtremeFilter(const List& items, Args& args, bool min) {
  const ItemKey key = TakeItemKey(args);
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    auto c = Compare(key(items[i]), key(items[best]));
    if (!c.ok()) return c.status();
    if (min ? *c < 0 : *c > 0) best = i;
  }
  return items[best];
}

// The filters that read a sequence (list, items, map, join, first...); none for another name.
std::optional<absl::StatusOr<Value>> SequenceFilter(const std::string& n, const Value& v,
                                                    Args& args) {
  if (n == "items") return ItemsFilter(v);
  if (n == "tojson") return ToJsonFilter(v, args);
  if (n == "selectattr" || n == "rejectattr") return SelectItems(v, args, true, n == "selectattr");
  if (n == "select" || n == "reject") return SelectItems(v, args, false, n == "select");
  if (n == "map") return MapFilter(v, args);
  if (n == "join") return JoinFilter(v, args);
  if (n == "reverse") return ReverseFilter(v);
  if (n == "unique") return UniqueFilter(v, args);
  if (n == "sort") return SortFilter(v, args);
  if (n == "dictsort") return DictSortFilter(v, args);
  if (n == "groupby") return GroupByFilter(v, args);
  if (n == "slice") return SliceFilter(v, args);
  if (n == "batch") return BatchFilter(v, args);
  if (n != "list" && n != "first" && n != "last" && n != "sum" && n != "min" && n != "max") {
    return std::nullopt;
  }
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  if (n == "list") return Value::MakeList(*std::move(items));
  if (n == "sum") return SumFilter(*items, args);
  if (n == "min" || n == "max") return ExtremeFilter(*items, args, n == "min");
  if (items->empty()) return Value::Undefined("No first item, sequence was empty.");
  return n == "first" ? items->front() : items->back();
}

// jinja2's indent(s, width=4, first=False, blank=False) of str(v).
absl::StatusOr<Value> IndentFilter(const Value& v, Args& args) {
  auto width = args.Take(0, "width");
  auto first = args.Take(1, "first");
  auto blank = args.Take(2, "blank");
  std::string indent = "    ";
  if (width && width->is_string()) {
    indent = width->s;
  } else if (width) {
    const std::optional<int64_t> w = AsInt(*width);
    if (!w) {
      return Error(
          absl::StrCat("indent: width must be a string or an int, not ", TypeName(*width)));
    }
    if (*w > static_cast<int64_t>(kMaxBuiltBytes)) return TooLong("indent");
    indent = std::string(static_cast<size_t>(std::max<int64_t>(0, *w)), ' ');
  }
  const std::string text = ToStr(v);
  // One indent per line at most.
  const size_t lines = SplitLines(Decode(text + "\n"), /*keepends=*/false).size();
  if (text.size() + lines * indent.size() > kMaxBuiltBytes) return TooLong("indent");
  return Value::Str(Indent(text, indent, first && Truthy(*first), blank && Truthy(*blank)));
}

// jinja2's replace(s, old, new, count=None) of str(v).
absl::StatusOr<Value> ReplaceFilter(const Value& v, Args& args) {
  auto o = args.Take(0, "old"), w = args.Take(1, "new"), c = args.Take(2, "count");
  if (!o || !w) return Error("replace: takes old and new");
  const std::string text = ToStr(v), old = ToStr(*o), with = ToStr(*w);
  if (!ReplaceFits(text, old, with)) return TooLong("replace");
  return Value::Str(Replace(text, old, with, c && !c->none() ? c->i : -1));
}

// The filters that change the case or shape of str(v); none for another name. jinja2 prints
// an undefined value as "" where a filter only reads its text; indent is an undefined error.
std::optional<absl::StatusOr<Value>> CaseFilter(const std::string& n, const Value& v, Args& args) {
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
  if (n == "replace") return ReplaceFilter(v, args);
  if (n != "indent") return std::nullopt;
  if (v.undefined()) return UndefinedError(v);
  return IndentFilter(v, args);
}

}  // namespace

absl::StatusOr<Value> ApplyFilter(const std::string& n, const Value& v, Args& args) {
  if (n == "default" || n == "d") {
    auto def = args.Take(0, "default_value");
    auto boolean = args.Take(1, "boolean");
    const bool use_default = v.undefined() || (boolean && Truthy(*boolean) && !Truthy(v));
    return use_default ? (def ? *def : Value::Str("")) : v;
  }
  if (const char* reason = UnsupportedFilterReason(n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the filter '", n, "' is not supported: ", reason));
  }
  if (n == "length" || n == "count") return Value::Int(Length(v));
  if (n == "string") return v.is_string() ? v : Value::Str(ToStr(v));
  if (n == "attr") return AttrFilter(v, args);
  if (n == "format") return FormatFilter(v, args);
  if (auto r = TextFilter(n, v, args)) return *std::move(r);
  if (auto r = SequenceFilter(n, v, args)) return *std::move(r);
  if (auto r = CaseFilter(n, v, args)) return *std::move(r);
  if (auto r = NumberFilter(n, v, args)) return *std::move(r);
  return Error(absl::StrCat("the filter '", n, "' is not supported"));
}

}  // namespace llm::frontend::jinja
