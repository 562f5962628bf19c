// Splits a Jinja template into tokens with Jinja2's whitespace rules as Hugging Face configures
// them: trim_blocks (the first newline after a block or comment tag is dropped), lstrip_blocks
// (spaces and tabs before a block or comment tag at the start of a line are dropped, unless the
// tag opens with '+'), and the '-' markers that strip all whitespace on that side of a tag.
#ifndef LLM_WORKER_FRONTEND_CHAT_JINJA_LEXER_H_
#define LLM_WORKER_FRONTEND_CHAT_JINJA_LEXER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace llm::frontend::jinja {

struct Token {
  enum class Type {
    kText,        // literal output
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,
    kString,  // value: unescaped
    kInt,
    kFloat,
    kOp,  // punctuation and operators: value is the operator
    kEnd,
  };
  Type type;
  std::string value;
  int line;
};

// Errors name the line: "chat template line 3: unterminated string".
absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source);

}  // namespace llm::frontend::jinja

#endif  // LLM_WORKER_FRONTEND_CHAT_JINJA_LEXER_H_
