// The reasoning parser: a thinking model's output split into its reasoning and its answer,
// whole or piece by piece (every split of the output gives the same result), the markers and
// the whitespace after them dropped; outputs with no reasoning untouched; the format chosen
// from the chat template; where the prompt leaves the output.
#include "worker/tools/reasoning_parser.h"

#include <string>

#include "gtest/gtest.h"

namespace llm::tools {
namespace {

// `output` fed in pieces of `piece` bytes (0: whole), then finished.
ReasoningOutput Parse(const std::string& output, bool in_reasoning, size_t piece = 0) {
  ReasoningParser p(in_reasoning);
  ReasoningOutput all;
  const size_t step = piece == 0 ? output.size() + 1 : piece;
  for (size_t at = 0; at < output.size(); at += step) {
    const ReasoningOutput out = p.Feed(output.substr(at, step));
    all.reasoning += out.reasoning;
    all.content += out.content;
  }
  const ReasoningOutput last = p.Finish();
  all.reasoning += last.reasoning;
  all.content += last.content;
  return all;
}

struct Case {
  const char* output;
  bool in_reasoning;
  const char* reasoning;
  const char* content;
};

TEST(ReasoningParserTest, SplitsTheSameWhateverThePieces) {
  const Case cases[] = {
      // Qwen3: the model opens the block.
      {"<think>\nThe user asks.\n</think>\n\nParis.", false, "The user asks.", "Paris."},
      {"<think>\nOne.\n\nTwo.  \n</think>Three", false, "One.\n\nTwo.", "Three"},
      // DeepSeek R1: the prompt opened it.
      {"Okay.</think>\n\nParis.", true, "Okay.", "Paris."},
      {"\n<think>x</think>y", false, "x", "y"},
      // No reasoning: all content, as written.
      {"Hello <think> there", false, "", "Hello <think> there"},
      {"  Hi", false, "", "  Hi"},
      {"<thi", false, "", "<thi"},
      {"<tool_call>{}</tool_call>", false, "", "<tool_call>{}</tool_call>"},
      // Qwen3 with thinking off: the prompt closed an empty block.
      {"Paris.", false, "", "Paris."},
      // Cut off while thinking: all reasoning, a marker's start too.
      {"<think>Still going </th", false, "Still going </th", ""},
      {"<think>Still going\n\n", false, "Still going", ""},
      // A later block is content.
      {"<think>a</think>b<think>c</think>", false, "a", "b<think>c</think>"},
      {"<think></think>\n\nOnly this.", false, "", "Only this."},
  };
  for (const Case& c : cases) {
    for (const size_t piece : {0, 1, 2, 3, 5, 7}) {
      const ReasoningOutput out = Parse(c.output, c.in_reasoning, piece);
      EXPECT_EQ(out.reasoning, c.reasoning) << c.output << " in pieces of " << piece;
      EXPECT_EQ(out.content, c.content) << c.output << " in pieces of " << piece;
    }
  }
}

// Reasoning streams as it comes: only a possible marker's start (and whitespace before it) is
// held back.
TEST(ReasoningParserTest, HoldsBackOnlyAPossibleMarker) {
  ReasoningParser p(/*in_reasoning=*/false);
  EXPECT_EQ(p.Feed("<thi").reasoning, "");
  EXPECT_EQ(p.Feed("nk>Let me see").reasoning, "Let me see");
  EXPECT_EQ(p.Feed(" more</").reasoning, " more");
  EXPECT_EQ(p.Feed("x\n").reasoning, "</x");  // not </think> after all; the newline waits
  const ReasoningOutput out = p.Feed("</think>Done");
  EXPECT_EQ(out.reasoning, "");
  EXPECT_EQ(out.content, "Done");
  ReasoningParser plain(/*in_reasoning=*/false);
  EXPECT_EQ(plain.Feed("Hi").content, "Hi");  // not a marker's start: out at once
}

TEST(ReasoningParserTest, TheFormatAndWhereThePromptLeavesTheOutput) {
  EXPECT_EQ(*ResolveReasoningFormat("auto", "{{ '<think>' }}...{{ '</think>' }}"),
            ReasoningFormat::kThink);
  EXPECT_EQ(*ResolveReasoningFormat("auto", "<|im_start|>{{ m.content }}"), ReasoningFormat::kNone);
  EXPECT_EQ(*ResolveReasoningFormat("none", "<think></think>"), ReasoningFormat::kNone);
  EXPECT_EQ(*ResolveReasoningFormat("think", ""), ReasoningFormat::kThink);
  const auto bad = ResolveReasoningFormat("deepseek", "");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("model.reasoning_parser"), std::string_view::npos);
  EXPECT_TRUE(PromptOpensReasoning("<|User|>Hi<|Assistant|><think>\n"));
  EXPECT_FALSE(PromptOpensReasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(PromptOpensReasoning("<|im_start|>assistant\n"));
  EXPECT_TRUE(PromptOpensReasoning("<think>a</think> ... <think>"));
  // A user's <think> earlier in the prompt opens nothing: only the prompt's end counts.
  EXPECT_FALSE(
      PromptOpensReasoning("<|im_start|>user\nWhat is <think>?<|im_end|>\n"
                           "<|im_start|>assistant\n"));
}

}  // namespace
}  // namespace llm::tools
