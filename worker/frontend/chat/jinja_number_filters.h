// jinja2 3.1's filters that read or make one number: int, float, abs and round, with Python's
// semantics (int64 overflow is an error naming the filter, as jinja_value.h's IntOverflowError
// has it). ApplyFilter (jinja_filters.cc) dispatches to them.
#ifndef LLM_WORKER_FRONTEND_CHAT_JINJA_NUMBER_FILTERS_H_
#define LLM_WORKER_FRONTEND_CHAT_JINJA_NUMBER_FILTERS_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "worker/frontend/chat/jinja_value.h"

namespace llm::frontend::jinja {

// The filter `n` applied to `v` if `n` is one of int, float, abs or round; none otherwise.
// Applied to an undefined value, each is jinja2's undefined error.
std::optional<absl::StatusOr<Value>> NumberFilter(const std::string& n, const Value& v, Args& args);

}  // namespace llm::frontend::jinja

#endif  // LLM_WORKER_FRONTEND_CHAT_JINJA_NUMBER_FILTERS_H_
