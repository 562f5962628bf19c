#include "worker/constraint/json_values.h"

#include "absl/strings/str_cat.h"
#include "worker/constraint/number_range.h"

namespace llm::constraint {

std::string JsonStringRegex() { return absl::StrCat("\"", kJsonStringChar, "*\""); }

std::string JsonObjectOf(const std::string& value) {
  const std::string member = absl::StrCat(JsonStringRegex(), ":(", value, ")");
  return absl::StrCat("\\{(", member, "(,", member, ")*)?\\}");
}

std::string JsonValueOf(const std::string& value) {
  return absl::StrCat(JsonStringRegex(), "|", AnyNumberRegex(), "|true|false|null|",
                      JsonObjectOf(value), "|\\[((", value, ")(,(", value, "))*)?\\]");
}

RulePatterns JsonObjectPatterns() {
  const std::string value = CallMarker(1);
  return {{"root", "value"}, {JsonObjectOf(value), JsonValueOf(value)}, true};
}

}  // namespace llm::constraint
