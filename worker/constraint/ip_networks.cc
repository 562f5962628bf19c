#include "worker/constraint/ip_networks.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/constraint/uri.h"

namespace llm::constraint {
namespace {

// A prefix length 0..max, in decimal without leading zeros.
std::string PrefixRegex(int max) {
  std::vector<std::string> alts;
  for (int n = 0; n <= max; ++n) alts.push_back(std::to_string(n));
  return absl::StrCat("(", absl::StrJoin(alts, "|"), ")");
}

// An IPv4 octet whose top `bits` (0..8) are free and whose others are zero.
std::string Octet(int bits) {
  if (bits >= 8) return "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  std::vector<std::string> alts;
  for (int v = 0; v < 256; v += 1 << (8 - bits)) alts.push_back(std::to_string(v));
  return absl::StrCat("(", absl::StrJoin(alts, "|"), ")");
}

// A hexadecimal digit whose top `bits` (0..4) are free and whose others are zero.
std::string HexDigit(int bits) {
  switch (bits) {
    case 0:
      return "0";
    case 1:
      return "[08]";
    case 2:
      return "[048cC]";
    case 3:
      return "[02468aAcCeE]";
    default:
      return "[0-9a-fA-F]";
  }
}

}  // namespace

std::string Ipv4NetworkRegex() {
  std::vector<std::string> alts;
  for (int n = 0; n <= 32; ++n) {
    std::vector<std::string> octets;
    for (int i = 0; i < 4; ++i) octets.push_back(Octet(std::clamp(n - 8 * i, 0, 8)));
    alts.push_back(absl::StrCat(absl::StrJoin(octets, "\\."), "/", n));
  }
  return absl::StrCat("(", absl::StrJoin(alts, "|"), ")");
}

std::string Ipv6NetworkRegex() {
  std::vector<std::string> alts;
  for (int n = 0; n <= 128; ++n) {
    std::vector<std::string> groups(static_cast<size_t>(n / 16), "[0-9a-fA-F]{1,4}");
    if (const int cut = n % 16; cut > 0) {
      std::string group;
      for (int d = 0; d < 4; ++d) group += HexDigit(std::clamp(cut - 4 * d, 0, 4));
      groups.push_back(group);
    }
    const std::string written = absl::StrJoin(groups, ":");
    alts.push_back(absl::StrCat(written, groups.size() == 8 ? "" : "::", "/", n));
  }
  return absl::StrCat("(", absl::StrJoin(alts, "|"), ")");
}

std::string Ipv4InterfaceRegex() { return absl::StrCat(Ipv4Regex(), "/", PrefixRegex(32)); }

std::string Ipv6InterfaceRegex() { return absl::StrCat(Ipv6Regex(), "/", PrefixRegex(128)); }

}  // namespace llm::constraint
