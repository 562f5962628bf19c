#include "router/openai/body_fields.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "router/openai/reference_fields.h"

namespace llm::router::openai {

using json = nlohmann::ordered_json;

absl::Status Bad(ApiError* e, std::string param, std::string message) {
  e->http_status = 400;
  e->param = std::move(param);
  e->message = std::move(message);
  return absl::InvalidArgumentError(e->message);
}

bool Is(const json& j, std::string_view text) {
  return j.is_string() && j.get_ref<const std::string&>() == text;
}

bool Present(const json& body, const char* key) {
  const auto it = body.find(key);
  return it != body.end() && !it->is_null();
}

// An integer field in [lo, hi]: false when absent or null.
absl::StatusOr<bool> Int(const json& body, const char* key, int64_t lo, int64_t hi, int64_t* out,
                         ApiError* e) {
  if (!Present(body, key)) return false;
  const json& v = body.at(key);
  if (!v.is_number_integer() &&
      !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())) {
    return Bad(e, key, absl::StrCat("'", key, "' must be an integer"));
  }
  // Compared exactly: unsigned values past INT64_MAX, and floats at or past +-2^63 (whose cast
  // to int64 is undefined), are out of any range.
  constexpr double kTwo63 = 9223372036854775808.0;
  bool in_range = false;
  int64_t value = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    in_range = u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    value = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    in_range = true;
    value = v.get<int64_t>();
  } else {
    const double d = v.get<double>();
    in_range = d >= -kTwo63 && d < kTwo63;
    value = in_range ? static_cast<int64_t>(d) : 0;
  }
  if (!in_range || value < lo || value > hi) {
    // Below a count's range, its upper bound (2^32 - 1) says nothing: leave it out.
    const bool below = in_range ? value < lo : v.is_number_float() && v.get<double>() < 0;
    const std::string range = below && hi >= std::numeric_limits<uint32_t>::max()
                                  ? absl::StrCat("at least ", lo)
                                  : absl::StrCat("in [", lo, ", ", hi, "]");
    return Bad(e, key, absl::StrCat("'", key, "' is ", v.dump(), "; it must be ", range));
  }
  *out = value;
  return true;
}

absl::StatusOr<bool> Number(const json& body, const char* key, double* out, ApiError* e) {
  if (!Present(body, key)) return false;
  const json& v = body.at(key);
  if (!v.is_number()) return Bad(e, key, absl::StrCat("'", key, "' must be a number"));
  *out = v.get<double>();
  return true;
}

absl::StatusOr<bool> Bool(const json& body, const char* key, bool* out, ApiError* e) {
  if (!Present(body, key)) return false;
  const json& v = body.at(key);
  if (!v.is_boolean()) return Bad(e, key, absl::StrCat("'", key, "' must be true or false"));
  *out = v.get<bool>();
  return true;
}

absl::Status CheckFields(json& body, const std::function<bool(const std::string&)>& known,
                         const ParseOptions& options, ApiError* e) {
  std::vector<std::string> unknown;
  for (const auto& [key, value] : body.items()) {
    if (!known(key)) {
      if (!options.ignore_unknown_fields) {
        return Bad(e, key, absl::StrCat("unknown parameter '", key, "'"));
      }
      LogIgnoredOnce(key, "not in the OpenAI reference (router.unknown_fields: ignore)");
      unknown.push_back(key);
      continue;
    }
    if (JsonNestsDeeperThan(value, kMaxJsonNesting - 1)) {
      return Bad(e, key,
                 absl::StrCat("'", key, "' nests deeper than ", kMaxJsonNesting, " levels"));
    }
  }
  for (const std::string& key : unknown) body.erase(key);
  return absl::OkStatus();
}

}  // namespace llm::router::openai
