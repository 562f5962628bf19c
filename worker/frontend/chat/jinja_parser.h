// The syntax tree of a chat template, and the parser that builds it from tokens. Statements:
// text, {{ expr }}, if/elif/else, for (with tuple targets, an `if` filter and `else`), set
// (names, tuples, `ns.attr`, and the block form), macro, break, continue, raw, and
// transformers' generation/endgeneration (its body as is). Expressions follow
// Jinja2's precedence: `a if c else b`, or, and, not, comparisons and `in`, + -, ~, * / // %,
// **, unary - +, then postfix `.name`, `[i]`, `[a:b:c]`, calls, `|filter(...)`, `is test`.
#ifndef LLM_WORKER_FRONTEND_CHAT_JINJA_PARSER_H_
#define LLM_WORKER_FRONTEND_CHAT_JINJA_PARSER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/frontend/chat/jinja_lexer.h"
#include "worker/frontend/chat/jinja_value.h"

namespace llm::frontend::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,       // value
    kName,          // name
    kList,          // items; name "tuple" for a tuple
    kDict,          // items: key, value, key, value, ...
    kAttr,          // items[0].name
    kIndex,         // items[0][items[1]]
    kSlice,         // items[0][items[1]:items[2]:items[3]] (null parts absent)
    kCall,          // items[0](items[1..], kwargs)
    kFilter,        // items[0] | name(items[1..], kwargs)
    kTest,          // items[0] is [not] name(items[1..])
    kUnary,         // name: "-", "+", "not"
    kBinary,        // name: an operator, "and", "or", "in", "not in", or a comparison
    kCond,          // items[1] if items[0] else items[2] (items[2] may be null)
    kCompareChain,  // items[0] ops[0] items[1] ops[1] items[2] ...: two or more comparisons
  };
  Kind kind;
  int line = 0;
  int height = 1;  // levels of expressions at and below this one (the parser bounds it)
  Value value;
  std::string name;
  bool negated = false;  // kTest: `is not`
  std::vector<ExprPtr> items;
  std::vector<std::string> ops;  // kCompareChain
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind { kText, kPrint, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue };
  Kind kind;
  int line = 0;
  std::string text;                                // kText
  ExprPtr expr;                                    // kPrint; kSet: the value; kFor: the iterable
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf: condition (null: else) and body
  std::vector<std::string> targets;                // kFor, kSet, kSetBlock: the names
  std::string attr;                                // kSet: `ns.attr` (targets[0] is ns)
  ExprPtr filter;                                  // kFor: `if` filter
  Body body, else_body;                            // kFor, kMacro, kSetBlock
  std::string name;                                // kMacro
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro: names and defaults (or null)
};

// Errors name the line: "chat template line 7: expected 'endif', got 'endfor'".
absl::StatusOr<Body> Parse(const std::vector<Token>& tokens);

}  // namespace llm::frontend::jinja

#endif  // LLM_WORKER_FRONTEND_CHAT_JINJA_PARSER_H_
