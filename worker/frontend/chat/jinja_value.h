// The values a chat template computes with, with Python's semantics where templates see them:
// truthiness, equality and ordering, str() (printing) and repr() (inside printed lists and
// dicts), and json.dumps (the `tojson` filter, as Hugging Face defines it: non-ASCII kept).
//
// Lists and dicts are immutable once built (the sandbox forbids mutating them); a namespace is
// the one mutable object (`set ns.x = ...`). Dicts keep insertion order, like Python's.
#ifndef LLM_WORKER_FRONTEND_CHAT_JINJA_VALUE_H_
#define LLM_WORKER_FRONTEND_CHAT_JINJA_VALUE_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace llm::frontend::jinja {

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order; keys are strings
struct Namespace {
  Dict attrs;
};
struct Args;
using Function = std::function<absl::StatusOr<Value>(Args&)>;

struct Value {
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kFunction
  };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                       // kString; kUndefined: the name, for errors
  std::shared_ptr<const List> list;    // kList (tuples too)
  std::shared_ptr<const Dict> dict;    // kDict
  std::shared_ptr<Namespace> ns;       // kNamespace
  std::shared_ptr<const Function> fn;  // kFunction
  bool macro = false;                  // kFunction: a template macro (returns its output)
  bool tuple = false;                  // kList: a tuple (prints as `(a, b)`)
  // kList tuple made by groupby: a (grouper, list) named tuple, whose items are also the
  // attributes `grouper` and `list`.
  bool group = false;
  // kString: markupsafe's Markup (from escape, forceescape, safe): escape leaves it as it is, `+`
  // escapes a plain string joined to it and repr prints Markup('...'). Only those filters make
  // one; other operations on it give a plain str (markupsafe's own methods keep Markup).
  bool markup = false;
  // Lists and dicts: how deep they nest (1 + the deepest item's), so that the renderer can bound
  // values a template builds in a loop (printing and freeing them recurse).
  int32_t depth = 0;

  static Value Undefined(std::string name = "") {
    Value v;
    v.s = std::move(name);
    return v;
  }
  static Value None() { return Of(Kind::kNone); }
  static Value Bool(bool x) {
    Value v = Of(Kind::kBool);
    v.b = x;
    return v;
  }
  static Value Int(int64_t x) {
    Value v = Of(Kind::kInt);
    v.i = x;
    return v;
  }
  static Value Float(double x) {
    Value v = Of(Kind::kFloat);
    v.f = x;
    return v;
  }
  static Value Str(std::string x) {
    Value v = Of(Kind::kString);
    v.s = std::move(x);
    return v;
  }
  static Value Markup(std::string x) {
    Value v = Str(std::move(x));
    v.markup = true;
    return v;
  }
  static Value MakeList(List x, bool tuple = false) {
    Value v = Of(Kind::kList);
    for (const Value& item : x) v.depth = std::max(v.depth, item.depth);
    ++v.depth;
    v.list = std::make_shared<const List>(std::move(x));
    v.tuple = tuple;
    return v;
  }
  static Value MakeDict(Dict x) {
    Value v = Of(Kind::kDict);
    for (const auto& [key, item] : x) v.depth = std::max(v.depth, item.depth);
    ++v.depth;
    v.dict = std::make_shared<const Dict>(std::move(x));
    return v;
  }
  static Value MakeFunction(Function fn, bool macro = false) {
    Value v = Of(Kind::kFunction);
    v.fn = std::make_shared<const Function>(std::move(fn));
    v.macro = macro;
    return v;
  }

  bool undefined() const { return kind == Kind::kUndefined; }
  bool none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  double number() const {
    return kind == Kind::kFloat ? f : static_cast<double>(kind == Kind::kBool ? b : i);
  }

 private:
  static Value Of(Kind k) {
    Value v;
    v.kind = k;
    return v;
  }
};

// The longest string a builtin builds (zfill, replace, join, indent, format widths): the default
// bound of a render's whole output. Longer is RESOURCE_EXHAUSTED, not an allocation that aborts
// the process ('x'.zfill(10**15)).
inline constexpr size_t kMaxBuiltBytes = 16 << 20;
absl::Status TooLong(const std::string& what);
// Whether s.replace(old, with) stays within kMaxBuiltBytes with every occurrence replaced.
bool ReplaceFits(const std::string& s, const std::string& old, const std::string& with);

// The undefined value's own message when an operation needs a defined one.
absl::Status UndefinedError(const Value& v);
// Python's ints have no bound; ours are 64 bits: past them is an error, never a wrapped number
// (as for the operators). `what` names the operation.
absl::Status IntOverflowError(const std::string& what);
// An int argument: Python takes a bool as an int too.
std::optional<int64_t> AsInt(const Value& v);

// Arguments of a call: positional, then keyword.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // The argument at `index` or named `name` (taken: a later call sees it absent), if given.
  std::optional<Value> Take(size_t index, const std::string& name);
};

// Looks `key` up in a dict; null when absent.
const Value* Find(const Dict& d, const std::string& key);

Value FromJson(const nlohmann::ordered_json& j);
bool Truthy(const Value& v);
bool Equal(const Value& a, const Value& b);
// -1, 0, 1; an error for values Python cannot order.
absl::StatusOr<int> Compare(const Value& a, const Value& b);
// Python's str(): what {{ }} prints (undefined prints nothing).
std::string ToStr(const Value& v);
// Python's repr() (for the items of printed lists and dicts).
std::string Repr(const Value& v);
// The arguments of Python's json.dumps that the `tojson` filter passes on.
struct JsonOptions {
  std::optional<std::string> indent;  // none: one line; else each level indents by this
  bool ensure_ascii = false;          // escape non-ASCII as \uXXXX (Hugging Face: False)
  bool sort_keys = false;
  // none: Python's defaults, ", " (or "," with an indent) and ": ".
  std::optional<std::pair<std::string, std::string>> separators;
};
// json.dumps(v, ...). An error for undefined values and functions.
absl::StatusOr<std::string> ToJson(const Value& v, const JsonOptions& options = {});
// Python's repr of a float ("1.0", "0.1", "1e+16").
std::string FloatRepr(double x);
// The name of a value's type, for errors ("int", "str", "list", ...).
std::string TypeName(const Value& v);
// Code points of a UTF-8 string (len(), slicing, iteration).
std::vector<std::string> CodePoints(const std::string& s);

}  // namespace llm::frontend::jinja

#endif  // LLM_WORKER_FRONTEND_CHAT_JINJA_VALUE_H_
