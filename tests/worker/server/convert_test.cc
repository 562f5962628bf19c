// ToSpec's chat JSON fields: a value nested deeper than kMaxJsonNesting is INVALID_ARGUMENT
// naming the field, before the chat template's values are made from it (a recursion per level,
// which a 40 KB body once overflowed, killing the worker); continue_final_message's checks.
#include "worker/server/convert.h"

#include <string>

#include "common/json_depth.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llm::server {
namespace {

using ::testing::HasSubstr;

std::string Nested(int levels) { return std::string(levels, '[') + std::string(levels, ']'); }

llm::v1::GenerateRequest Chat() {
  llm::v1::GenerateRequest r;
  auto* m = r.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("hi");
  return r;
}

TEST(ConvertTest, ChatJsonNestedTooDeepNamesTheField) {
  llm::v1::GenerateRequest r = Chat();
  r.mutable_chat()->set_template_kwargs_json(R"({"x": )" + Nested(100000) + "}");
  auto spec = ToSpec(r);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("chat.template_kwargs_json: nests deeper"));

  r = Chat();
  r.mutable_chat()->mutable_messages(0)->set_tool_calls_json(Nested(kMaxJsonNesting + 1));
  spec = ToSpec(r);
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("chat.messages[0].tool_calls_json"));

  r = Chat();
  r.mutable_chat()->set_tools_json(Nested(kMaxJsonNesting + 1));
  EXPECT_THAT(ToSpec(r).status().message(), HasSubstr("chat.tools_json"));

  // kMaxJsonNesting levels are accepted.
  r = Chat();
  r.mutable_chat()->set_tools_json(Nested(kMaxJsonNesting));
  r.mutable_chat()->set_template_kwargs_json(R"({"x": )" + Nested(kMaxJsonNesting - 1) + "}");
  EXPECT_TRUE(ToSpec(r).ok()) << ToSpec(r).status();
}

TEST(ConvertTest, JsonDepthCountsWithoutRecursing) {
  const auto parse = [](const std::string& s) { return nlohmann::json::parse(s); };
  EXPECT_FALSE(JsonNestsDeeperThan(parse("3"), 0));
  EXPECT_TRUE(JsonNestsDeeperThan(parse("[]"), 0));
  EXPECT_FALSE(JsonNestsDeeperThan(parse("[]"), 1));
  EXPECT_TRUE(JsonNestsDeeperThan(parse(R"({"a": [1, {"b": []}]})"), 2));
  EXPECT_FALSE(JsonNestsDeeperThan(parse(R"({"a": [1, {"b": []}]})"), 4));
  EXPECT_TRUE(JsonNestsDeeperThan(parse(R"({"a": [1, {"b": []}]})"), 3));
  EXPECT_TRUE(JsonNestsDeeperThan(parse(R"([1, [2, [3, [4]]], []])"), 3));
  EXPECT_TRUE(JsonNestsDeeperThan(parse(Nested(200000)), kMaxJsonNesting));
}

// continue_final_message: the chat is rendered to be continued, without the generation
// prompt; a gRPC client that asks it of a user's last message, or with the generation prompt,
// is told so by the field's name.
// An assistant message's reasoning_content reaches the template as the message's own field.
TEST(ConvertTest, ReasoningContentIsTheMessagesField) {
  llm::v1::GenerateRequest r = Chat();
  auto* m = r.mutable_chat()->add_messages();
  m->set_role("assistant");
  m->set_content("Hello.");
  m->set_reasoning_content("Greet back.");
  auto spec = ToSpec(r);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->chat->messages[1]["reasoning_content"], "Greet back.");
  EXPECT_FALSE(spec->chat->messages[0].contains("reasoning_content"));
}

TEST(ConvertTest, ContinueFinalMessageNeedsTheAssistantsMessageLast) {
  llm::v1::GenerateRequest r = Chat();
  r.mutable_chat()->set_continue_final_message(true);
  EXPECT_THAT(ToSpec(r).status().message(),
              HasSubstr("chat.continue_final_message: the last message must be the assistant's"));
  auto* m = r.mutable_chat()->add_messages();
  m->set_role("assistant");
  m->set_content("Hello,");
  auto spec = ToSpec(r);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(spec->chat.has_value());
  EXPECT_TRUE(spec->chat->continue_final_message);
  EXPECT_FALSE(spec->chat->add_generation_prompt);
  r.mutable_chat()->set_add_generation_prompt(true);
  EXPECT_THAT(ToSpec(r).status().message(),
              HasSubstr("chat.continue_final_message: not with add_generation_prompt true"));
}

}  // namespace
}  // namespace llm::server
