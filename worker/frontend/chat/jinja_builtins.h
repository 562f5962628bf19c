// What chat templates can call: all of jinja2 3.1's builtin filters and tests, the safe methods
// of strings and dicts, attribute and item access with jinja2's rules, and the globals (range,
// namespace, dict, raise_exception, strftime_now). The filters are in jinja_filters.cc (their
// text algorithms in jinja_text_filters.cc), the rest in jinja_builtins.cc. Two filters exist
// without working, so that `'random' is filter` holds as in jinja2: random (not deterministic)
// and urlize (not implemented); applying one is an INVALID_ARGUMENT error naming it. pprint is an
// error where pformat would break its output across lines.
//
// There is no autoescaping; escape, forceescape and safe give a Markup string as in jinja2
// (Value::markup), which escape leaves as it is and the `escaped` test recognises.
//
// Strings are UTF-8 and behave as Python 3.11's str: methods and filters count, slice, classify
// and case-map code points with Python's rules (its whitespace and line boundaries, full case
// mappings such as ß → SS, final sigma), from utf8proc's Unicode data (Unicode 15; Python 3.11
// has 14, so characters new in 15 may differ). Malformed UTF-8 bytes pass through unchanged.
// Integers are 64-bit: a result Python would print beyond that (int("1" * 20), sum, abs, round)
// is an INVALID_ARGUMENT "integer overflow" error, never a wrapped number. Python's exceptions
// (ValueError, TypeError...) are INVALID_ARGUMENT errors that name the method and what Python
// complains of.
#ifndef LLM_WORKER_FRONTEND_CHAT_JINJA_BUILTINS_H_
#define LLM_WORKER_FRONTEND_CHAT_JINJA_BUILTINS_H_

#include <string>

#include "absl/status/statusor.h"
#include "worker/frontend/chat/jinja_value.h"

namespace llm::frontend::jinja {

// The payload that marks a template's own raise_exception (its message is the error's).
inline constexpr char kRaisedPayload[] = "llm.jinja.raised";

bool HasFilter(const std::string& name);
bool HasTest(const std::string& name);
absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& v, Args& args);
absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& v, Args& args);

// `v.name`: jinja2 tries the attribute (a safe method of a string or dict, a namespace's
// attribute), then the item. Undefined when absent; an error on an undefined `v`.
absl::StatusOr<Value> GetAttr(const Value& v, const std::string& name);
// `v[key]`: the item (negative list indices count from the end), then the attribute.
absl::StatusOr<Value> GetItem(const Value& v, const Value& key);
// The items a for loop visits: a list's items, a dict's keys, a string's characters; nothing
// for an undefined value; an error for others.
absl::StatusOr<List> Iterate(const Value& v);

// range, namespace, dict, raise_exception, strftime_now (`today`: YYYY-MM-DD, or now).
Dict Globals(const std::string& today);

}  // namespace llm::frontend::jinja

#endif  // LLM_WORKER_FRONTEND_CHAT_JINJA_BUILTINS_H_
