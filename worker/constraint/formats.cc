#include "worker/constraint/formats.h"

#include "absl/strings/str_cat.h"
#include "worker/constraint/dates.h"
#include "worker/constraint/ip_networks.h"
#include "worker/constraint/uri.h"

namespace llm::constraint::schema {

absl::StatusOr<std::string> FormatRegex(const json& f, const std::string& path) {
  static const std::string date = DateRegex();
  static const std::string time =
      "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5]"
      "[0-9])";
  const std::string name = f.is_string() ? f.get<std::string>() : "";
  if (name == "date") return date;
  if (name == "time") return time;
  if (name == "date-time") return date + "T" + time;
  if (name == "uuid") {
    return std::string(
        "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}");
  }
  if (name == "duration") return DurationRegex();
  if (name == "ipv4") return Ipv4Regex();
  if (name == "ipv6") return Ipv6Regex();
  if (name == "ipvanyaddress") return absl::StrCat("((", Ipv4Regex(), ")|", Ipv6Regex(), ")");
  if (name == "ipv4network") return Ipv4NetworkRegex();
  if (name == "ipv6network") return Ipv6NetworkRegex();
  if (name == "ipvanynetwork") {
    return absl::StrCat("(", Ipv4NetworkRegex(), "|", Ipv6NetworkRegex(), ")");
  }
  if (name == "ipv4interface") return Ipv4InterfaceRegex();
  if (name == "ipv6interface") return Ipv6InterfaceRegex();
  if (name == "ipvanyinterface") {
    return absl::StrCat("((", Ipv4InterfaceRegex(), ")|(", Ipv6InterfaceRegex(), "))");
  }
  // Pydantic's Base64Bytes and Base64UrlBytes: padded, as Python's decoders require.
  if (name == "base64" || name == "base64url") {
    const std::string c = name == "base64" ? "[A-Za-z0-9+/]" : "([A-Za-z0-9_]|-)";
    return absl::StrCat("(", c, "{4})*(", c, "{2}==|", c, "{3}=)?");
  }
  if (name == "email") {
    return std::string("[a-zA-Z0-9._%+-]+@[a-zA-Z0-9-]+(\\.[a-zA-Z0-9-]+)*\\.[a-zA-Z]{2,}");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("constraint.json_schema: ", path, ": ", f.dump(), " is not supported"));
}

}  // namespace llm::constraint::schema
