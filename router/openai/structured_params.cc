#include "router/openai/structured_params.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "router/openai/body_fields.h"

namespace llm::router::openai {
namespace {

using json = nlohmann::ordered_json;

// A schema given as an object or as the text of one, as the worker's constraint.json_schema.
absl::StatusOr<std::string> SchemaText(const json& schema, const std::string& param, ApiError* e) {
  if (schema.is_object() || schema.is_boolean()) return schema.dump();
  if (schema.is_string()) {
    const json parsed = json::parse(schema.get<std::string>(), nullptr, false);
    if (!parsed.is_discarded() && parsed.is_object()) return schema.get<std::string>();
  }
  return Bad(e, param, absl::StrCat("'", param, "' must be a JSON Schema (an object)"));
}

}  // namespace

absl::Status ParseConstraint(const json& body, llm::v1::GenerateRequest& r, ApiError* e) {
  std::vector<std::pair<std::string, const json*>> given;  // (param, value) of each constraint
  if (Present(body, "response_format")) {
    const json& f = body["response_format"];
    const json type = f.is_object() && f.contains("type") ? f["type"] : json();
    if (type == "json_object") {
      given.emplace_back("response_format", &f);
    } else if (type == "json_schema") {
      if (!f.contains("json_schema") || !f["json_schema"].is_object() ||
          !f["json_schema"].contains("schema")) {
        return Bad(e, "response_format",
                   "'response_format.json_schema.schema' is required with type json_schema");
      }
      given.emplace_back("response_format.json_schema.schema", &f["json_schema"]["schema"]);
    } else if (type != "text") {
      return Bad(e, "response_format",
                 "'response_format.type' must be text, json_object or json_schema");
    }
  }
  if (Present(body, "structured_outputs")) {
    const json& so = body["structured_outputs"];
    if (!so.is_object())
      return Bad(e, "structured_outputs", "'structured_outputs' must be an object");
    for (const auto& [key, value] : so.items()) {
      if (key != "json" && key != "regex" && key != "choice" && key != "json_object" &&
          key != "grammar") {
        return Bad(e, "structured_outputs",
                   absl::StrCat("'structured_outputs.", key,
                                "' is not supported (json, regex, choice, grammar, json_object)"));
      }
      given.emplace_back("structured_outputs." + key, &value);
    }
  }
  for (const char* key : {"guided_json", "guided_regex", "guided_choice", "guided_grammar"}) {
    if (Present(body, key)) given.emplace_back(key, &body[key]);
  }
  if (given.empty()) return absl::OkStatus();
  if (given.size() > 1) {
    return Bad(e, given[1].first,
               absl::StrCat("'", given[1].first, "' and '", given[0].first,
                            "' both constrain the output; give one"));
  }
  const auto& [param, value] = given[0];
  llm::v1::Constraint* c = r.mutable_constraint();
  if (param == "response_format" || param == "structured_outputs.json_object") {
    c->set_json_object(true);
  } else if (param.find("json") != std::string::npos) {
    auto text = SchemaText(*value, param, e);
    if (!text.ok()) return text.status();
    c->set_json_schema(*text);
  } else if (param.find("regex") != std::string::npos) {
    if (!value->is_string()) return Bad(e, param, absl::StrCat("'", param, "' must be a string"));
    c->set_regex(value->get<std::string>());
  } else if (param.find("grammar") != std::string::npos) {
    if (!value->is_string() || value->get<std::string>().empty()) {
      return Bad(e, param, absl::StrCat("'", param, "' must be a GBNF grammar (a string)"));
    }
    c->set_grammar(value->get<std::string>());
  } else {
    if (!value->is_array() || value->empty()) {
      return Bad(e, param, absl::StrCat("'", param, "' must be a non-empty array of strings"));
    }
    for (const json& choice : *value) {
      if (!choice.is_string()) {
        return Bad(e, param, absl::StrCat("'", param, "' must hold strings"));
      }
      c->mutable_choice()->add_choices(choice.get<std::string>());
    }
  }
  return absl::OkStatus();
}

}  // namespace llm::router::openai
