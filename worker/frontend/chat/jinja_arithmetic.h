// Python's arithmetic on template values (jinja2 evaluates + - * / // % ** with Python's
// operators): int64 results, an error where Python's int would pass 64 bits; floats; str and
// list concatenation and repetition; Markup + str escaping the str. The renderer
// (jinja_template.cc) keeps ~, comparisons, `in` and str % args.
#ifndef LLM_WORKER_FRONTEND_CHAT_JINJA_ARITHMETIC_H_
#define LLM_WORKER_FRONTEND_CHAT_JINJA_ARITHMETIC_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "worker/frontend/chat/jinja_value.h"

namespace llm::frontend::jinja {

// `a op b` for op one of + - * / // % **. INVALID_ARGUMENT with Python's complaint (an
// undefined operand, unsupported operand types, division by zero, an int past 64 bits);
// RESOURCE_EXHAUSTED, naming template line `line`, for a string past `max_bytes` bytes or a
// list past max_bytes / 16 items, and for a repetition past `max_bytes`.
absl::StatusOr<Value> Arithmetic(const std::string& op, const Value& a, const Value& b, int line,
                                 size_t max_bytes);

}  // namespace llm::frontend::jinja

#endif  // LLM_WORKER_FRONTEND_CHAT_JINJA_ARITHMETIC_H_
