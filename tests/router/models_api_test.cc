// /v1/models' bodies: OpenAI's list (with vLLM's max_model_len), and Anthropic's for its SDKs
// (type, display_name, created_at in RFC 3339, lifecycle, has_more and the first and last ids).
#include "router/openai/models_api.h"

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace llm::router::openai {
namespace {

using nlohmann::json;

TEST(ModelsApiTest, OpenAisShape) {
  const ModelsShape shape{.anthropic = false, .created = 1700000000};
  const json list = json::parse(ModelsListBody({{"a", 4096}, {"b", 0}}, shape));
  EXPECT_EQ(list["object"], "list");
  ASSERT_EQ(list["data"].size(), 2u);
  EXPECT_EQ(list["data"][0], json::parse(R"({"id": "a", "object": "model",
      "created": 1700000000, "owned_by": "llm-serving", "max_model_len": 4096})"));
  EXPECT_FALSE(list["data"][1].contains("max_model_len"));  // none reported
  EXPECT_EQ(json::parse(ModelBody("a", 4096, shape)), list["data"][0]);
}

TEST(ModelsApiTest, AnthropicsShape) {
  const ModelsShape shape{.anthropic = true, .created = 1700000000};
  const json list = json::parse(ModelsListBody({{"a", 4096}, {"b", 0}}, shape));
  EXPECT_EQ(list["has_more"], false);
  EXPECT_EQ(list["first_id"], "a");
  EXPECT_EQ(list["last_id"], "b");
  EXPECT_EQ(list["data"][0], json::parse(R"({"type": "model", "id": "a", "display_name": "a",
      "created_at": "2023-11-14T22:13:20Z", "lifecycle": "active", "max_input_tokens": 4096})"));
  const json empty = json::parse(ModelsListBody({}, shape));
  EXPECT_TRUE(empty["data"].empty());
  EXPECT_TRUE(empty["first_id"].is_null());
}

}  // namespace
}  // namespace llm::router::openai
