#include "worker/tools/tool_format.h"

#include "absl/strings/str_cat.h"

namespace llm::tools {

std::string_view ToolFormatName(ToolFormat format) {
  switch (format) {
    case ToolFormat::kLlama3Json:
      return "llama3_json";
    case ToolFormat::kHermes:
      return "hermes";
    case ToolFormat::kMistral:
      return "mistral";
    case ToolFormat::kGranite:
      return "granite";
    case ToolFormat::kJson:
      return "json";
    case ToolFormat::kNone:
      break;
  }
  return "none";
}

ToolFormat DetectToolFormat(std::string_view source) {
  const auto has = [&](std::string_view marker) {
    return source.find(marker) != std::string_view::npos;
  };
  if (has("<tool_call>")) return ToolFormat::kHermes;
  if (has("[TOOL_CALLS]")) return ToolFormat::kMistral;
  if (has("<|tool_call|>")) return ToolFormat::kGranite;
  // Llama 3.1 names <|python_tag|>; 3.2 only asks for {"name", "parameters"} in the ipython
  // role's conversation.
  if (has("<|python_tag|>") || (has("\"parameters\"") && has("ipython"))) {
    return ToolFormat::kLlama3Json;
  }
  return ToolFormat::kNone;
}

absl::StatusOr<ToolFormat> ResolveToolFormat(std::string_view name,
                                             std::string_view template_source) {
  if (name == "auto") return DetectToolFormat(template_source);
  for (ToolFormat f : {ToolFormat::kNone, ToolFormat::kLlama3Json, ToolFormat::kHermes,
                       ToolFormat::kMistral, ToolFormat::kGranite, ToolFormat::kJson}) {
    if (name == ToolFormatName(f)) return f;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("model.tool_call_parser: '", std::string(name),
                   "' is not one of auto, llama3_json, hermes, mistral, granite, json, none"));
}

}  // namespace llm::tools
