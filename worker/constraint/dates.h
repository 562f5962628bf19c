// Dates and durations for JSON Schema's `format: date`, `date-time` and `duration`, as byte
// regexes (byte_regex.h). Pure logic.
#ifndef LLM_WORKER_CONSTRAINT_DATES_H_
#define LLM_WORKER_CONSTRAINT_DATES_H_

#include <string>

namespace llm::constraint {

// A calendar date YYYY-MM-DD of years 0001..9999, each month's days, February 29 only in
// leap years.
std::string DateRegex();
// An ISO 8601 duration as RFC 3339 (Appendix A) writes one.
std::string DurationRegex();

}  // namespace llm::constraint

#endif  // LLM_WORKER_CONSTRAINT_DATES_H_
