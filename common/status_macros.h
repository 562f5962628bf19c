// Helpers for propagating absl::Status through functions that return Status or StatusOr.
#ifndef LLM_COMMON_STATUS_MACROS_H_
#define LLM_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define LLM_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::absl::Status llm_status_ = (expr);       \
    if (!llm_status_.ok()) return llm_status_; \
  } while (0)

#define LLM_CONCAT_INNER_(a, b) a##b
#define LLM_CONCAT_(a, b) LLM_CONCAT_INNER_(a, b)

// `LLM_ASSIGN_OR_RETURN(auto x, Foo());` declares x from a StatusOr or returns its error.
#define LLM_ASSIGN_OR_RETURN(lhs, expr) \
  LLM_ASSIGN_OR_RETURN_IMPL_(LLM_CONCAT_(llm_statusor_, __LINE__), lhs, expr)
#define LLM_ASSIGN_OR_RETURN_IMPL_(var, lhs, expr) \
  auto var = (expr);                               \
  if (!var.ok()) return std::move(var).status();   \
  lhs = std::move(var).value()

#endif  // LLM_COMMON_STATUS_MACROS_H_
