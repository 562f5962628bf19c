#include "worker/constraint/uri.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "worker/constraint/number_range.h"

namespace llm::constraint {
namespace {

// RFC 3986's unreserved, sub-delims, ':' and '@' (a pchar but the percent escape), and '/'.
constexpr char kPathChar[] = "[a-zA-Z0-9._~!$&'()*+,;=:@/-]";
// The same and '?' (query and fragment).
constexpr char kQueryChar[] = "[a-zA-Z0-9._~!$&'()*+,;=:@/?-]";
constexpr char kEscape[] = "%[0-9a-fA-F][0-9a-fA-F]";

// One unit of `chars`: a character of the class or a percent escape; `count` is "*" or a
// bound such as "{0,349}".
std::string Units(const char* chars, const std::string& count) {
  return absl::StrCat("(", chars, "|", kEscape, ")", count);
}

// The parts' bounds for a maximum length.
struct UriBounds {
  std::string label = "*";  // a label's characters after its first
  int max_labels = -1;      // -1: any
  std::string path = "*", query = "*", fragment = "*";
};

UriBounds BoundsFor(int max_length) {
  UriBounds b;
  constexpr int kLabels = 5, kMaxLabel = 63;
  const int host = std::min(kLabels * (kMaxLabel + 1) - 1, max_length / 4);
  const int label = std::min(kMaxLabel, (host + 1) / kLabels - 1);
  b.label = absl::StrCat("{0,", label - 1, "}");
  b.max_labels = kLabels;
  // "https://", the host, ":65535", and the '/', '?' and '#' that open the parts.
  const int rest = max_length - 8 - (kLabels * (label + 1) - 1) - 6 - 3;
  const int units = rest / 3;
  const int path = units * 6 / 10, query = units * 3 / 10;
  b.path = absl::StrCat("{0,", path, "}");
  b.query = absl::StrCat("{0,", query, "}");
  b.fragment = absl::StrCat("{0,", units - path - query, "}");
  return b;
}

}  // namespace

absl::StatusOr<std::string> UriRegex(std::optional<int> max_length) {
  if (max_length && *max_length < kMinUriMaxLength) {
    return absl::InvalidArgumentError(absl::StrCat("a maxLength of at least ", kMinUriMaxLength,
                                                   " is supported with format \"uri\""));
  }
  // Past kMaxBoundedUriLength the parts keep that bound's (the regex counts stop at 1,000).
  const UriBounds b =
      max_length ? BoundsFor(std::min(*max_length, kMaxBoundedUriLength)) : UriBounds{};
  const std::string label = absl::StrCat("[a-zA-Z0-9][a-zA-Z0-9-]", b.label);
  const std::string more_labels =
      b.max_labels < 0 ? "*" : absl::StrCat("{0,", b.max_labels - 1, "}");
  return absl::StrCat("https?:\\/\\/", label, "(\\.", label, ")", more_labels, "(:(",
                      UIntRangeRegex(0, 65535), "))?", "(\\/", Units(kPathChar, b.path), ")?",
                      "(\\?", Units(kQueryChar, b.query), ")?", "(#", Units(kQueryChar, b.fragment),
                      ")?");
}

}  // namespace llm::constraint
