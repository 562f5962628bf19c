#include "worker/constraint/dates.h"

#include "absl/strings/str_cat.h"

namespace llm::constraint {

// A calendar date YYYY-MM-DD of years 0001..9999: each month's days, February 29 only in
// leap years (divisible by 4, and by 400 where by 100), as a date parser checks it.
std::string DateRegex() {
  const std::string year = "(000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})";
  const std::string leap =
      "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)";
  return absl::StrCat("(", year, "-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-",
                      "(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))|", leap, "-02-29)");
}

// An ISO 8601 duration as RFC 3339 (Appendix A) writes one: P1Y2M3D, P4W, PT5H6M7S, P1DT2H;
// the units of the time part contiguous (hours, minutes, seconds from the first given).
std::string DurationRegex() {
  const std::string n = "[0-9]+";
  const std::string second = n + "S";
  const std::string minute = n + "M(" + second + ")?";
  const std::string hour = n + "H(" + minute + ")?";
  const std::string time = "T(" + hour + "|" + minute + "|" + second + ")";
  const std::string day = n + "D";
  const std::string month = n + "M(" + day + ")?";
  const std::string year = n + "Y(" + month + ")?";
  return "P((" + day + "|" + month + "|" + year + ")(" + time + ")?|" + time + "|" + n + "W)";
}

}  // namespace llm::constraint
