#include "router/openai/models_api.h"

#include <ctime>

#include "nlohmann/json.hpp"

namespace llm::router::openai {
namespace {

using json = nlohmann::ordered_json;

std::string Rfc3339(int64_t unix_seconds) {
  const auto t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char out[32];
  std::strftime(out, sizeof(out), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return out;
}

json Model(const std::string& name, uint32_t context, const ModelsShape& shape) {
  if (shape.anthropic) {
    json j = {{"type", "model"},
              {"id", name},
              {"display_name", name},
              {"created_at", Rfc3339(shape.created)},
              {"lifecycle", "active"}};
    if (context > 0) j["max_input_tokens"] = context;
    return j;
  }
  json j = {
      {"id", name}, {"object", "model"}, {"created", shape.created}, {"owned_by", "llm-serving"}};
  if (context > 0) j["max_model_len"] = context;
  return j;
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::string ModelsListBody(const ServedModels& models, const ModelsShape& shape) {
  json data = json::array();
  for (const auto& [name, context] : models) data.push_back(Model(name, context, shape));
  if (!shape.anthropic) return Dump({{"object", "list"}, {"data", std::move(data)}});
  const json first = data.empty() ? json(nullptr) : data.front()["id"];
  const json last = data.empty() ? json(nullptr) : data.back()["id"];
  return Dump(
      {{"data", std::move(data)}, {"has_more", false}, {"first_id", first}, {"last_id", last}});
}

std::string ModelBody(const std::string& name, uint32_t context, const ModelsShape& shape) {
  return Dump(Model(name, context, shape));
}

}  // namespace llm::router::openai
