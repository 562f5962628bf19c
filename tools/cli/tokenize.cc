// llm-cli tokenize / detokenize: JSON lines in, JSON lines out, one per input line. A bad line
// gets {"error": "..."} and the rest carry on; the exit code is 1 if any line failed.
#include <iostream>
#include <string>

#include "nlohmann/json.hpp"
#include "tools/cli/commands.h"
#include "tools/common/tool_util.h"
#include "worker/frontend/tokenizer.h"

namespace llm::cli {

using tools::Fail;
using tools::ParseOrExit;
namespace {

using nlohmann::json;

// Reads JSON lines from stdin and calls `handle(line_number, object)` for each, which returns
// the output object or an error.
int ProcessLines(const std::function<absl::StatusOr<json>(const json&)>& handle) {
  std::string line;
  int line_number = 0;
  bool failed = false;
  while (std::getline(std::cin, line)) {
    ++line_number;
    if (line.empty()) continue;
    json out;
    json in = json::parse(line, nullptr, false);
    if (in.is_discarded() || !in.is_object()) {
      out["error"] = "line " + std::to_string(line_number) + ": not a JSON object";
    } else {
      auto result = handle(in);
      if (result.ok()) {
        out = *std::move(result);
      } else {
        out["error"] =
            "line " + std::to_string(line_number) + ": " + std::string(result.status().message());
      }
    }
    failed = failed || out.contains("error");
    std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  }
  std::cout.flush();
  return failed ? 1 : 0;
}

absl::StatusOr<std::unique_ptr<frontend::Tokenizer>> LoadTokenizer(const FlagSet& flags) {
  if (absl::Status st = flags.Require({"tokenizer"}); !st.ok()) return st;
  return frontend::Tokenizer::Load(flags.GetString("tokenizer"));
}

}  // namespace

int RunTokenize(const std::vector<std::string>& args) {
  const std::string cmd = "llm-cli tokenize";
  FlagSet flags;
  flags.Value("tokenizer", "directory holding tokenizer.json, the file, or a GGUF file")
      .Bool("add-special", "add special tokens (BOS) as the tokenizer config says");
  if (int rc = ParseOrExit(cmd, flags, args); rc >= 0) return rc;
  auto tokenizer = LoadTokenizer(flags);
  if (!tokenizer.ok()) return Fail(cmd, tokenizer.status());
  const bool add_special = flags.GetBool("add-special");
  return ProcessLines([&](const json& in) -> absl::StatusOr<json> {
    if (!in.contains("text") || !in["text"].is_string()) {
      return absl::InvalidArgumentError("text: missing or not a string");
    }
    auto ids = (*tokenizer)->Encode(in["text"].get<std::string>(), add_special);
    if (!ids.ok()) return ids.status();
    return json{{"ids", *ids}};
  });
}

int RunDetokenize(const std::vector<std::string>& args) {
  const std::string cmd = "llm-cli detokenize";
  FlagSet flags;
  flags.Value("tokenizer", "directory holding tokenizer.json, the file, or a GGUF file")
      .Bool("keep-special", "keep special tokens in the text (default: skip them)");
  if (int rc = ParseOrExit(cmd, flags, args); rc >= 0) return rc;
  auto tokenizer = LoadTokenizer(flags);
  if (!tokenizer.ok()) return Fail(cmd, tokenizer.status());
  const bool skip_special = !flags.GetBool("keep-special");
  return ProcessLines([&](const json& in) -> absl::StatusOr<json> {
    if (!in.contains("ids") || !in["ids"].is_array()) {
      return absl::InvalidArgumentError("ids: missing or not an array");
    }
    std::vector<int32_t> ids;
    for (const json& id : in["ids"]) {
      // An unsigned past INT64_MAX read as int64 is negative (2^64 - 1 passed as -1).
      if (!id.is_number_integer() ||
          (id.is_number_unsigned() && id.get<uint64_t>() > uint64_t{INT32_MAX}) ||
          id.get<int64_t>() < INT32_MIN || id.get<int64_t>() > INT32_MAX) {
        return absl::InvalidArgumentError("ids: every element must be a 32-bit integer");
      }
      ids.push_back(id.get<int32_t>());
    }
    auto text = (*tokenizer)->Decode(ids, skip_special);
    if (!text.ok()) return text.status();
    return json{{"text", *text}};
  });
}

}  // namespace llm::cli
