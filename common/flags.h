// A small command-line parser for subcommands: `--name value`, `--name=value` and boolean
// `--name`. Unknown flags and missing values are errors that name the flag.
#ifndef LLM_COMMON_FLAGS_H_
#define LLM_COMMON_FLAGS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace llm {

class FlagSet {
 public:
  // Declares a flag taking a value, with its help text; `default_value` is shown in help.
  FlagSet& Value(const std::string& name, const std::string& help,
                 std::optional<std::string> default_value = std::nullopt);
  // Declares a boolean flag (present = true).
  FlagSet& Bool(const std::string& name, const std::string& help);

  // Parses args (without the program and subcommand names). Positional arguments are kept.
  absl::Status Parse(const std::vector<std::string>& args);

  bool Has(const std::string& name) const;
  // The last value given, else the default, else "".
  std::string GetString(const std::string& name) const;
  // Every value given, in order (a flag may be repeated).
  std::vector<std::string> GetAll(const std::string& name) const;
  absl::StatusOr<int64_t> GetInt(const std::string& name) const;
  absl::StatusOr<double> GetDouble(const std::string& name) const;
  bool GetBool(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }

  // Errors unless every flag in `names` was given.
  absl::Status Require(const std::vector<std::string>& names) const;

  std::string Help() const;

 private:
  struct Spec {
    std::string help;
    bool is_bool = false;
    std::optional<std::string> default_value;
  };
  std::map<std::string, Spec> specs_;
  std::vector<std::string> order_;
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

}  // namespace llm

#endif  // LLM_COMMON_FLAGS_H_
