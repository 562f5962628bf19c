#include "common/config/config.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/mapped_file.h"
#include "common/version.h"

namespace llm::config {
namespace {

std::string FormatDouble(double v) {
  std::string s = absl::StrCat(v);
  return s;
}

}  // namespace

ConfigSchema& ConfigSchema::Int(const std::string& key, int64_t def, int64_t min_value,
                                int64_t max_value, const std::string& help) {
  keys_[key] = Key{Type::kInt,
                   absl::StrCat(def),
                   false,
                   static_cast<double>(min_value),
                   static_cast<double>(max_value),
                   help};
  order_.push_back(key);
  return *this;
}

ConfigSchema& ConfigSchema::Double(const std::string& key, double def, double min_value,
                                   double max_value, const std::string& help) {
  keys_[key] = Key{Type::kDouble, FormatDouble(def), false, min_value, max_value, help};
  order_.push_back(key);
  return *this;
}

ConfigSchema& ConfigSchema::String(const std::string& key, const std::string& def,
                                   const std::string& help) {
  keys_[key] = Key{Type::kString, def, false, 0, 0, help};
  order_.push_back(key);
  return *this;
}

ConfigSchema& ConfigSchema::Bool(const std::string& key, bool def, const std::string& help) {
  keys_[key] = Key{Type::kBool, def ? "true" : "false", false, 0, 0, help};
  order_.push_back(key);
  return *this;
}

ConfigSchema& ConfigSchema::RequiredString(const std::string& key, const std::string& help) {
  keys_[key] = Key{Type::kString, "", true, 0, 0, help};
  order_.push_back(key);
  return *this;
}

absl::Status ConfigSchema::Set(std::map<std::string, std::string>& values, const std::string& key,
                               const std::string& value, const std::string& source) const {
  const auto it = keys_.find(key);
  if (it == keys_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": unknown key '", key, "'"));
  }
  const Key& k = it->second;
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", key, ": '", value, "' ", what));
  };
  switch (k.type) {
    case Type::kInt: {
      int64_t v;
      if (!absl::SimpleAtoi(value, &v)) return bad("is not an integer");
      if (v < k.min_value || v > k.max_value) {
        return bad(absl::StrCat("is outside [", static_cast<int64_t>(k.min_value), ", ",
                                static_cast<int64_t>(k.max_value), "]"));
      }
      break;
    }
    case Type::kDouble: {
      double v;
      if (!absl::SimpleAtod(value, &v) || !std::isfinite(v)) return bad("is not a number");
      if (v < k.min_value || v > k.max_value) {
        return bad(absl::StrCat("is outside [", k.min_value, ", ", k.max_value, "]"));
      }
      break;
    }
    case Type::kBool:
      if (value != "true" && value != "false") return bad("is not true or false");
      break;
    case Type::kString:
      break;
  }
  values[key] = value;
  return absl::OkStatus();
}

absl::Status CheckHostPort(const std::string& key, const std::string& value, bool allow_empty,
                           int min_port) {
  if (value.empty()) {
    if (allow_empty) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(key, ": required (host:port)"));
  }
  size_t colon = value.rfind(':');
  if (value[0] == '[') {
    const size_t close = value.find(']');
    colon = close != std::string::npos && close + 1 < value.size() && value[close + 1] == ':'
                ? close + 1
                : std::string::npos;
  }
  const std::string port = colon == std::string::npos ? "" : value.substr(colon + 1);
  int64_t number = -1;
  const bool digits = !port.empty() && port.size() <= 5 &&
                      port.find_first_not_of("0123456789") == std::string::npos &&
                      absl::SimpleAtoi(port, &number);
  if (!digits || number < min_port || number > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        key, ": '", value, "' is not host:port with a port in [", min_port, ", 65535]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ConfigValues> ConfigSchema::Load(const std::vector<std::string>& args) const {
  std::string path;
  for (size_t i = 0; i < args.size(); ++i) {
    const bool flag = args[i] == "--config" || args[i].rfind("--config=", 0) == 0;
    if (args[i] == "--config" && i + 1 < args.size()) path = args[i + 1];
    if (args[i].rfind("--config=", 0) == 0) path = args[i].substr(9);
    if (flag && path.empty()) return absl::InvalidArgumentError("--config: needs a file");
  }
  std::string text;
  if (!path.empty()) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--config: ", path, ": is a directory (give the YAML file in it)"));
    }
    auto read = ReadFileToString(path);
    if (!read.ok()) return read.status();
    text = *std::move(read);
  }
  return LoadText(text, path.empty() ? "config" : path, args);
}

absl::Status ConfigSchema::ApplyYaml(const std::string& yaml, const std::string& source,
                                     ConfigValues& out) const {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ":", e.mark.line + 1, ": ", e.msg));
  }
  if (!root.IsNull() && !root.IsMap()) {
    return absl::InvalidArgumentError(source + ": the top level must be a mapping");
  }
  // Flatten nested mappings into dotted keys, in file order (a queue), each key once.
  std::deque<std::pair<std::string, YAML::Node>> queue;
  std::map<std::string, std::string> given;  // key (or section) -> where
  if (root.IsMap()) queue.emplace_back("", root);
  while (!queue.empty()) {
    auto [prefix, node] = queue.front();
    queue.pop_front();
    for (const auto& kv : node) {
      const std::string where = absl::StrCat(source, ":", kv.first.Mark().line + 1);
      if (!kv.first.IsScalar()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": keys must be plain names (an unfilled template?)"));
      }
      const std::string key = prefix + kv.first.Scalar();
      if (const auto [it, fresh] = given.emplace(key, where); !fresh) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": '", key, "' is given twice (first at ", it->second, ")"));
      }
      if (kv.second.IsMap()) {
        // A section: some key must live under it, and it must not be a key itself.
        if (keys_.count(key)) {
          return absl::InvalidArgumentError(absl::StrCat(where, ": ", key, ": expected a value"));
        }
        const auto under = keys_.lower_bound(key + ".");
        if (under == keys_.end() || under->first.rfind(key + ".", 0) != 0) {
          return absl::InvalidArgumentError(absl::StrCat(where, ": unknown key '", key, "'"));
        }
        queue.emplace_back(key + ".", kv.second);
      } else if (kv.second.IsScalar()) {
        if (absl::Status st = Set(out.values_, key, kv.second.Scalar(), where); !st.ok()) return st;
        out.sources_[key] = where;
      } else if (kv.second.IsNull()) {
        if (!keys_.count(key)) {
          return absl::InvalidArgumentError(absl::StrCat(where, ": unknown key '", key, "'"));
        }
      } else {
        return absl::InvalidArgumentError(absl::StrCat(where, ": ", key, ": expected a value"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ConfigSchema::ApplyFlags(const std::vector<std::string>& args,
                                      ConfigValues& out) const {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", a, "'"));
    }
    std::string key = a.substr(2), value;
    if (const size_t eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else {
      const auto it = keys_.find(key);
      if (it == keys_.end() && key != "config") {
        return absl::InvalidArgumentError(
            absl::StrCat("flag --", key, ": unknown key '", key, "'"));
      }
      const bool is_bool = it != keys_.end() && it->second.type == Type::kBool;
      if (is_bool && (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0)) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("flag --", key, " needs a value"));
      }
    }
    if (key == "config") continue;
    if (absl::Status st = Set(out.values_, key, value, "flag --" + key); !st.ok()) return st;
    out.sources_[key] = "flag";
  }
  return absl::OkStatus();
}

absl::StatusOr<ConfigValues> ConfigSchema::LoadText(const std::string& yaml,
                                                    const std::string& source,
                                                    const std::vector<std::string>& args) const {
  ConfigValues out;
  for (const auto& [key, k] : keys_) {
    out.values_[key] = k.default_value;
    out.sources_[key] = "default";
  }
  if (!yaml.empty()) {
    if (absl::Status st = ApplyYaml(yaml, source, out); !st.ok()) return st;
  }
  if (absl::Status st = ApplyFlags(args, out); !st.ok()) return st;
  for (const auto& [key, k] : keys_) {
    if (k.required && out.values_[key].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, ": required (set it in the YAML file or with --", key, ")"));
    }
  }
  return out;
}

std::string ConfigSchema::Help() const {
  std::string out;
  for (const std::string& key : order_) {
    const Key& k = keys_.at(key);
    absl::StrAppend(&out, "  --", key, " (",
                    k.required ? "required" : "default: " + k.default_value, ")\n      ", k.help,
                    "\n");
  }
  return out;
}

std::string ConfigSchema::DefaultsYaml(const std::string& placeholder) const {
  // Keys are grouped by their first part; deeper nesting is written out in dotted form below it.
  std::map<std::string, std::vector<std::string>> sections;
  std::vector<std::string> section_order;
  for (const std::string& key : order_) {
    const size_t dot = key.find('.');
    const std::string section = dot == std::string::npos ? "" : key.substr(0, dot);
    if (!sections.count(section)) section_order.push_back(section);
    sections[section].push_back(key);
  }
  std::string out;
  for (const std::string& section : section_order) {
    const std::string indent = section.empty() ? "" : "  ";
    if (!section.empty()) absl::StrAppend(&out, section, ":\n");
    for (const std::string& key : sections[section]) {
      const Key& k = keys_.at(key);
      const std::string name = section.empty() ? key : key.substr(section.size() + 1);
      std::string value = k.required ? placeholder : k.default_value;
      if (k.type == Type::kString) value = "\"" + value + "\"";
      absl::StrAppend(&out, indent, "# ", k.help, "\n", indent, name, ": ", value, "\n");
    }
  }
  return out;
}

int64_t ConfigValues::Int(const std::string& key) const {
  int64_t v = 0;
  (void)absl::SimpleAtoi(values_.at(key), &v);
  return v;
}

double ConfigValues::Double(const std::string& key) const {
  double v = 0;
  (void)absl::SimpleAtod(values_.at(key), &v);
  return v;
}

const std::string& ConfigValues::String(const std::string& key) const { return values_.at(key); }

bool ConfigValues::Bool(const std::string& key) const { return values_.at(key) == "true"; }

const std::string& ConfigValues::Source(const std::string& key) const { return sources_.at(key); }

std::optional<int> HandleInfoFlags(const ConfigSchema& schema, const std::string& program,
                                   const std::vector<std::string>& args,
                                   const std::string& placeholder) {
  for (const auto& a : args) {
    if (a == "--print-config") {
      std::printf("# %s configuration: every key with its default.\n%s", program.c_str(),
                  schema.DefaultsYaml(placeholder).c_str());
      return 0;
    }
    if (a == "--version") {
      std::printf("%s\n", VersionLine(program).c_str());
      return 0;
    }
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: %s [--config FILE] [--key value ...] | --print-config | --version\nkeys:\n%s",
          program.c_str(), schema.Help().c_str());
      return 0;
    }
  }
  return std::nullopt;
}

}  // namespace llm::config
