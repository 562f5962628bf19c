// llm-cli chat-template: renders conversations with a model's chat template, as the worker
// does for chat requests. JSON lines in, one out per line:
//   {"messages": [...], "add_generation_prompt": true, "tools": [...], "kwargs": {...}}
//   -> {"text": "..."}  or  {"error": "..."} (a template that raises, a bad line)
// A line without "tools" renders with tools none. The exit code is 1 if any line failed.
#include "worker/frontend/chat/chat_template.h"

#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include "common/json_depth.h"
#include "nlohmann/json.hpp"
#include "tools/cli/commands.h"
#include "tools/common/tool_util.h"

namespace llm::cli {

using tools::Fail;
using tools::ParseOrExit;

int RunChatTemplate(const std::vector<std::string>& args) {
  const std::string cmd = "llm-cli chat-template";
  FlagSet flags;
  flags
      .Value("tokenizer",
             "tokenizer or model directory (tokenizer_config.json, chat_template.jinja)", "")
      .Value("template", "template file, instead of the directory's", "")
      .Value("bos-token", "bos_token for --template without --tokenizer (absent: not passed)")
      .Value("eos-token", "eos_token for --template without --tokenizer (absent: not passed)")
      .Value("now", "YYYY-MM-DD that strftime_now sees (default: today)", "");
  if (int rc = ParseOrExit(cmd, flags, args); rc >= 0) return rc;
  const std::string dir = flags.GetString("tokenizer");
  const std::string file = flags.GetString("template");
  if (dir.empty() && file.empty()) {
    return Fail(cmd, absl::InvalidArgumentError("--tokenizer or --template is required"));
  }
  absl::StatusOr<frontend::ChatTemplate> tmpl = absl::UnknownError("");
  if (dir.empty()) {
    std::ifstream f(file, std::ios::binary);
    if (!f) return Fail(cmd, absl::NotFoundError("--template: cannot read " + file));
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const auto token = [&](const char* flag) -> std::optional<std::string> {
      if (!flags.Has(flag)) return std::nullopt;
      return flags.GetString(flag);
    };
    tmpl = frontend::ChatTemplate::FromSource(text, token("bos-token"), token("eos-token"));
  } else {
    tmpl = frontend::ChatTemplate::Load(dir, file);
  }
  if (!tmpl.ok()) return Fail(cmd, tmpl.status());
  frontend::jinja::RenderOptions options;
  options.today = flags.GetString("now");
  using Json = nlohmann::ordered_json;
  std::string line;
  int line_number = 0;
  bool failed = false;
  while (std::getline(std::cin, line)) {
    ++line_number;
    if (line.empty()) continue;
    Json out;
    const Json in = Json::parse(line, nullptr, false);
    const std::string where = "line " + std::to_string(line_number) + ": ";
    if (in.is_discarded() || !in.is_object() || !in.contains("messages")) {
      out["error"] = where + "not a JSON object with messages";
    } else if (JsonNestsDeeperThan(in, kMaxJsonNesting)) {  // before anything copies it
      out["error"] = where + "nested more than " + std::to_string(kMaxJsonNesting) + " deep";
    } else if (in.contains("add_generation_prompt") && !in["add_generation_prompt"].is_boolean()) {
      out["error"] = where + "add_generation_prompt must be true or false";
    } else {
      auto text = tmpl->Apply(in["messages"], in.value("tools", Json(nullptr)),
                              in.value("add_generation_prompt", false),
                              in.value("kwargs", Json::object()), options);
      if (text.ok()) {
        out["text"] = *std::move(text);
      } else {
        out["error"] = std::string(text.status().message());
      }
    }
    failed = failed || out.contains("error");
    std::cout << out.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
  }
  std::cout.flush();
  return failed ? 1 : 0;
}

}  // namespace llm::cli
