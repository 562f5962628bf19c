#include "worker/constraint/json_values.h"

#include "absl/strings/str_cat.h"
#include "worker/constraint/number_range.h"

namespace llm::constraint {

std::string JsonStringRegex() { return absl::StrCat("\"", kJsonStringChar, "*\""); }

std::string JsonObjectRegex(int depth) {
  const std::string member = absl::StrCat(JsonStringRegex(), ":(", AnyJsonRegex(depth - 1), ")");
  return absl::StrCat("\\{(", member, "(,", member, ")*)?\\}");
}

RulePatterns JsonObjectPatterns() {
  const std::string value = CallMarker(1);
  const std::string member = absl::StrCat(JsonStringRegex(), ":", value);
  const std::string object = absl::StrCat("\\{(", member, "(,", member, ")*)?\\}");
  const std::string scalar =
      absl::StrCat(JsonStringRegex(), "|", AnyNumberRegex(), "|true|false|null");
  return {{"root", "value"},
          {object, absl::StrCat(scalar, "|", object, "|\\[(", value, "(,", value, ")*)?\\]")},
          true};
}

std::string AnyJsonRegex(int depth) {
  std::string scalar = absl::StrCat(JsonStringRegex(), "|", AnyNumberRegex(), "|true|false|null");
  if (depth <= 0) return scalar;
  const std::string inner = AnyJsonRegex(depth - 1);
  return absl::StrCat(scalar, "|", JsonObjectRegex(depth), "|\\[((", inner, ")(,(", inner,
                      "))*)?\\]");
}

}  // namespace llm::constraint
