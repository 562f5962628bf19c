// The content (quotes not included) of a JSON Schema string `format`: date, time, date-time,
// uuid, duration, ipv4, ipv6, ipvanyaddress, the networks and interfaces of ip_networks.h,
// base64, base64url, email (json_schema.cc serves uri, binary, password and path itself, with
// the lengths beside them). Pure logic.
#ifndef LLM_WORKER_CONSTRAINT_FORMATS_H_
#define LLM_WORKER_CONSTRAINT_FORMATS_H_

#include <string>

#include "absl/status/statusor.h"
#include "worker/constraint/schema_merge.h"

namespace llm::constraint::schema {

// The regex of format `f`'s strings; INVALID_ARGUMENT naming `path` for another format.
absl::StatusOr<std::string> FormatRegex(const json& f, const std::string& path);

}  // namespace llm::constraint::schema

#endif  // LLM_WORKER_CONSTRAINT_FORMATS_H_
