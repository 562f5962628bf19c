// Process configuration: one YAML file, every key overridable by a flag, validated at start.
//
// Keys are dotted paths ("engine.max_slots") that match the YAML nesting:
//   engine:
//     max_slots: 64
// and the flag `--engine.max_slots=64` (or `--engine.max_slots 64`). `--config FILE` names the
// YAML file. Unknown keys, in the file or as flags, are errors, as are values of the wrong type
// or outside their range; every error names the key and where the value came from.
#ifndef LLM_COMMON_CONFIG_CONFIG_H_
#define LLM_COMMON_CONFIG_CONFIG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace llm::config {

class ConfigValues;

class ConfigSchema {
 public:
  ConfigSchema& Int(const std::string& key, int64_t default_value, int64_t min_value,
                    int64_t max_value, const std::string& help);
  ConfigSchema& Double(const std::string& key, double default_value, double min_value,
                       double max_value, const std::string& help);
  ConfigSchema& String(const std::string& key, const std::string& default_value,
                       const std::string& help);
  ConfigSchema& Bool(const std::string& key, bool default_value, const std::string& help);
  // A string key with no default that must be given.
  ConfigSchema& RequiredString(const std::string& key, const std::string& help);

  // Reads `--config FILE` (if present) and then every `--key value` flag from `args`.
  absl::StatusOr<ConfigValues> Load(const std::vector<std::string>& args) const;
  // Reads YAML text (`source` names it in errors), then the flag overrides.
  absl::StatusOr<ConfigValues> LoadText(const std::string& yaml, const std::string& source,
                                        const std::vector<std::string>& args) const;

  // Every key with its default and help, as flags (for --help).
  std::string Help() const;
  // Every key with its default, as a commented YAML document (for --print-config); required
  // keys get `placeholder`.
  std::string DefaultsYaml(const std::string& placeholder) const;

 private:
  enum class Type { kInt, kDouble, kString, kBool };
  struct Key {
    Type type;
    std::string default_value;  // as text; empty with required
    bool required = false;
    double min_value = 0;
    double max_value = 0;
    std::string help;
  };
  absl::Status Set(std::map<std::string, std::string>& values, const std::string& key,
                   const std::string& value, const std::string& source) const;
  // LoadText's parts: the YAML document's keys (nested mappings are dotted keys; each key
  // once), then the flags.
  absl::Status ApplyYaml(const std::string& yaml, const std::string& source,
                         ConfigValues& out) const;
  absl::Status ApplyFlags(const std::vector<std::string>& args, ConfigValues& out) const;
  std::map<std::string, Key> keys_;
  std::vector<std::string> order_;
  friend class ConfigValues;
};

// Validated values. Getters take a declared key of the right type.
class ConfigValues {
 public:
  int64_t Int(const std::string& key) const;
  double Double(const std::string& key) const;
  const std::string& String(const std::string& key) const;
  bool Bool(const std::string& key) const;
  // Where a key's value came from ("default", "FILE:LINE", "flag").
  const std::string& Source(const std::string& key) const;

 private:
  friend class ConfigSchema;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::string> sources_;
};

// The informational flags of a server's main(): with --print-config, prints every key of
// `schema` with its default as YAML (`placeholder` for required keys); with --help or -h, the
// usage line and the keys. Returns the exit code when one of them was given, nullopt otherwise.
std::optional<int> HandleInfoFlags(const ConfigSchema& schema, const std::string& program,
                                   const std::vector<std::string>& args,
                                   const std::string& placeholder);

// An address key's value: "host:port", "[v6]:port" or (a listener on every address) ":port",
// with a decimal port in [min_port, 65535]; empty when `allow_empty` (the key turns something
// off). INVALID_ARGUMENT naming `key` otherwise: getaddrinfo and gRPC wrapped a port past
// 65535 (99999 listened on 34463) instead of refusing it.
absl::Status CheckHostPort(const std::string& key, const std::string& value, bool allow_empty,
                           int min_port);

}  // namespace llm::config

#endif  // LLM_COMMON_CONFIG_CONFIG_H_
