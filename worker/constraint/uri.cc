#include "worker/constraint/uri.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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
  std::string label = "*";  // a label's units (a character, maybe after a '-') after its first
  int max_labels = -1;      // -1: any
  std::string path = "*", query = "*", fragment = "*";
};

UriBounds BoundsFor(int max_length) {
  UriBounds b;
  constexpr int kMaxLabels = 5, kMaxLabel = 63;
  const int host = std::min(kMaxLabels * (kMaxLabel + 1) - 1, max_length / 4);
  const int labels = std::clamp(host / 8, 2, kMaxLabels);  // fewer, longer ones when short
  const int label = std::min(kMaxLabel, (host + 1) / labels - 1);
  b.label = absl::StrCat("{0,", (label - 1) / 2, "}");  // units of up to 2 characters
  b.max_labels = labels;
  // "https://", the host, ":65535", and the '/', '?' and '#' that open the parts.
  const int rest = max_length - 8 - (labels * (label + 1) - 1) - 6 - 3;
  const int units = rest / 3;
  const int path = units * 6 / 10, query = units * 3 / 10;
  b.path = absl::StrCat("{0,", path, "}");
  b.query = absl::StrCat("{0,", query, "}");
  b.fragment = absl::StrCat("{0,", units - path - query, "}");
  return b;
}

}  // namespace

std::string Ipv4Regex() {
  const std::string octet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  return absl::StrCat(octet, "(\\.", octet, "){3}");
}

std::string Ipv6Regex() {
  const std::string h = "[0-9a-fA-F]{1,4}";
  std::vector<std::string> alts = {absl::StrCat("(", h, ":){7}", h)};
  for (int k = 0; k <= 7; ++k) {
    const std::string head = k == 0 ? "" : absl::StrCat("(", h, ":){", k - 1, "}", h);
    const std::string tail = k == 7 ? "" : absl::StrCat("(", h, "(:", h, "){0,", 6 - k, "})?");
    alts.push_back(absl::StrCat(head, "::", tail));
  }
  return absl::StrCat("(", absl::StrJoin(alts, "|"), ")");
}

absl::StatusOr<std::string> UriRegex(std::optional<int> max_length) {
  if (max_length && *max_length < kMinUriMaxLength) {
    return absl::InvalidArgumentError(absl::StrCat("a maxLength of at least ", kMinUriMaxLength,
                                                   " is supported with format \"uri\""));
  }
  // Past kMaxBoundedUriLength the parts keep that bound's (the regex counts stop at 1,000).
  const UriBounds b =
      max_length ? BoundsFor(std::min(*max_length, kMaxBoundedUriLength)) : UriBounds{};
  // Labels of letters and digits with single hyphens inside; the last starts with a letter
  // (a WHATWG parser, Pydantic's, reads a host whose last label is a number as IPv4, and
  // "xn--" would ask for Punycode).
  const std::string units = absl::StrCat("(-?[a-zA-Z0-9])", b.label);
  const std::string labels = b.max_labels < 0 ? "*" : absl::StrCat("{0,", b.max_labels - 1, "}");
  return absl::StrCat("https?:\\/\\/(", Ipv4Regex(), "|([a-zA-Z0-9]", units, "\\.)", labels,
                      "[a-zA-Z]", units, ")(:(", UIntRangeRegex(0, 65535), "))?", "(\\/",
                      Units(kPathChar, b.path), ")?", "(\\?", Units(kQueryChar, b.query), ")?",
                      "(#", Units(kQueryChar, b.fragment), ")?");
}

}  // namespace llm::constraint
