#include "common/flags.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace llm {

FlagSet& FlagSet::Value(const std::string& name, const std::string& help,
                        std::optional<std::string> default_value) {
  specs_[name] = Spec{help, false, std::move(default_value)};
  order_.push_back(name);
  return *this;
}

FlagSet& FlagSet::Bool(const std::string& name, const std::string& help) {
  specs_[name] = Spec{help, true, std::nullopt};
  order_.push_back(name);
  return *this;
}

absl::Status FlagSet::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const auto it = specs_.find(name);
    if (it == specs_.end())
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    if (it->second.is_bool) {
      if (value && *value != "true" && *value != "false") {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " takes true or false"));
      }
      values_[name].push_back(value.value_or("true"));
      continue;
    }
    if (!value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      }
      value = args[++i];
    }
    values_[name].push_back(*value);
  }
  return absl::OkStatus();
}

bool FlagSet::Has(const std::string& name) const { return values_.count(name) > 0; }

std::string FlagSet::GetString(const std::string& name) const {
  if (auto it = values_.find(name); it != values_.end()) return it->second.back();
  if (auto it = specs_.find(name); it != specs_.end() && it->second.default_value) {
    return *it->second.default_value;
  }
  return "";
}

std::vector<std::string> FlagSet::GetAll(const std::string& name) const {
  const auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

absl::StatusOr<int64_t> FlagSet::GetInt(const std::string& name) const {
  const std::string s = GetString(name);
  int64_t v = 0;
  if (!absl::SimpleAtoi(s, &v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": not an integer: '", s, "'"));
  }
  return v;
}

absl::StatusOr<double> FlagSet::GetDouble(const std::string& name) const {
  const std::string s = GetString(name);
  double v = 0;
  if (!absl::SimpleAtod(s, &v) || std::isnan(v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": not a number: '", s, "'"));
  }
  return v;
}

bool FlagSet::GetBool(const std::string& name) const { return GetString(name) == "true"; }

absl::Status FlagSet::Require(const std::vector<std::string>& names) const {
  for (const auto& n : names) {
    if (!Has(n)) return absl::InvalidArgumentError(absl::StrCat("missing required flag --", n));
  }
  return absl::OkStatus();
}

std::string FlagSet::Help() const {
  std::string out;
  for (const auto& name : order_) {
    const Spec& s = specs_.at(name);
    absl::StrAppend(&out, "  --", name, s.is_bool ? "" : " VALUE", "\n      ", s.help);
    if (s.default_value) absl::StrAppend(&out, " (default: ", *s.default_value, ")");
    absl::StrAppend(&out, "\n");
  }
  return out;
}

}  // namespace llm
