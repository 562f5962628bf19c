// A Jinja2 template engine for chat templates. It renders real Hugging Face chat templates byte
// for byte as transformers' apply_chat_template does: Python jinja2 with trim_blocks,
// lstrip_blocks and loop controls, jinja2's lenient undefined values, a `tojson` that keeps
// non-ASCII text, and the globals `raise_exception` and `strftime_now`.
//
// Sandboxed: templates see only the context's values, a few safe methods of strings and dicts,
// and the builtins below; lists and dicts cannot be mutated (namespaces can, as in jinja2).
// Bounded: total loop iterations, macro recursion and output size have limits
// (RenderOptions), strings and lists built by joining, repeating or padding are bounded like
// the output, the parser bounds nesting (512 levels), rendering bounds its recursion (1,024
// levels, macro calls included) and values nest at most 256 lists or dicts deep, so a hostile
// template ends with an error instead of running away or overflowing the stack. Integers are 64
// bits (Python's are unbounded): overflow is an error, and a JSON integer past int64 becomes the
// nearest float.
//
// Supported: text, {{ }}, {# #}, if/elif/else, for (tuple targets, `if` filter, else,
// loop.index/index0/revindex/revindex0/first/last/length/previtem/nextitem), break/continue,
// set (names, tuples, ns.attr, block form), macros (defaults, keyword arguments, recursion);
// literals (strings, numbers, lists, dicts, tuples), arithmetic, comparisons, in/not in, ~,
// and/or/not, `a if c else b`, attribute and item access, slices; jinja2 3.1's builtin filters
// and tests (jinja_builtins.h says which fail). Errors name the template line.
#ifndef LLM_WORKER_FRONTEND_CHAT_JINJA_TEMPLATE_H_
#define LLM_WORKER_FRONTEND_CHAT_JINJA_TEMPLATE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "worker/frontend/chat/jinja_parser.h"

namespace llm::frontend::jinja {

struct RenderOptions {
  int64_t max_loop_iterations = 1'000'000;  // over the whole render
  int max_recursion_depth = 64;             // nested macro calls
  size_t max_output_bytes = 16 << 20;
  std::string today;  // YYYY-MM-DD for strftime_now; empty: the local date and time now
};

class Template {
 public:
  // INVALID_ARGUMENT naming the line for a syntax error or an unknown filter or test.
  static absl::StatusOr<Template> Parse(std::string_view source);
  // Renders with `context`'s keys as variables. INVALID_ARGUMENT naming the line for a render
  // error; a template's raise_exception("msg") gives "chat template raised: msg"; a limit
  // gives RESOURCE_EXHAUSTED.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context,
                                     const RenderOptions& options = {}) const;

 private:
  explicit Template(std::shared_ptr<const Body> body) : body_(std::move(body)) {}
  std::shared_ptr<const Body> body_;
};

}  // namespace llm::frontend::jinja

#endif  // LLM_WORKER_FRONTEND_CHAT_JINJA_TEMPLATE_H_
