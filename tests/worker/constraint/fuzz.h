// Random mutations of client input for fuzz tests (constraint_fuzz_test.cc, the tools'): JSON
// documents with nodes replaced and schema keywords set to values of every kind, texts with
// spans edited, and the check that a mutated constraint compiles or fails cleanly.
#ifndef LLM_TESTS_WORKER_CONSTRAINT_FUZZ_H_
#define LLM_TESTS_WORKER_CONSTRAINT_FUZZ_H_

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "worker/constraint/constraint.h"
#include "worker/constraint/token_table.h"

namespace llm::constraint::fuzz {

// The environment's `name` as a number (LLM_FUZZ_RUNS, LLM_FUZZ_SEED), else `otherwise`.
inline int EnvInt(const char* name, int otherwise) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : otherwise;
}

// Values of every kind a keyword might be given.
inline constexpr char kPool[] = R"([true, false, null, 0, 1, -1, 2.5, 1e300, -0.0,
    18446744073709551615, "", "x", "string", "integer", "object", "#/$defs/N", "#",
    "#/$defs/missing", "^[a-z]+$", "(", "date", "uuid", [], [1], ["a", "b"], [{}],
    [{"type": "string"}, false], [["x"]], {}, {"type": "string"},
    {"type": "integer", "minimum": 3}, {"$ref": "#/$defs/N"}, {"N": {"type": "string"}},
    {"a": {}}, {"a": {"type": "null"}}, {"type": []}, {"enum": []}, {"const": {}},
    {"anyOf": []}, {"allOf": [{}, {}]}, {"items": false}, {"$ref": 1}])";

// The keywords a mutation sets.
inline const std::vector<std::string>& Keywords() {
  static const auto* keywords = new std::vector<std::string>(absl::StrSplit(
      "type enum const anyOf oneOf allOf $ref properties required additionalProperties items "
      "prefixItems minItems maxItems uniqueItems minLength maxLength pattern format minimum "
      "maximum multipleOf exclusiveMinimum propertyNames patternProperties minProperties "
      "maxProperties $defs definitions discriminator name function parameters",
      ' '));
  return *keywords;
}

// Every node of `j`, the root first.
template <class Json>
void Nodes(Json& j, std::vector<Json*>& out) {
  out.push_back(&j);
  if (j.is_object()) {
    for (auto& [k, v] : j.items()) Nodes(v, out);
  } else if (j.is_array()) {
    for (Json& v : j) Nodes(v, out);
  }
}

// One to three mutations of `s`: a node below the root replaced by a kPool value, or a keyword
// of a random object set to one.
template <class Json>
Json Mutated(Json s, std::mt19937& rng) {
  static const Json pool = Json::parse(kPool);
  const int n = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < n; ++i) {
    std::vector<Json*> nodes;
    Nodes(s, nodes);
    Json* node = nodes[rng() % nodes.size()];
    const Json& value = pool[rng() % pool.size()];
    if (node->is_object() && rng() % 2 == 0) {
      (*node)[Keywords()[rng() % Keywords().size()]] = value;
    } else if (node != &s) {
      *node = value;
    }
  }
  return s;
}

// Every byte, and a few longer tokens, so any output can be spelled.
inline std::shared_ptr<const TokenTable> Vocabulary() {
  std::vector<std::string> bytes = {""};  // id 0: the stop token
  for (int b = 1; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  for (const char* t : {"\"a\"", "true", "null", "{\"", "\":", "\",\"", "12", "-0.5", "ab"}) {
    bytes.push_back(t);
  }
  return std::make_shared<TokenTable>(bytes);
}

// Compiled as the worker compiles it (an error: INVALID_ARGUMENT naming the field), then a
// few random tokens of its masks taken: each one the mask allows must be one the constraint
// takes. Whether the spec was served; `what` names the input in failures, and an error must
// begin with `field`.
inline bool Compiled(const ConstraintSpec& spec, const std::shared_ptr<const TokenTable>& vocab,
                     std::mt19937& rng, const std::string& what,
                     std::string_view field = "constraint.") {
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> c;
  try {
    c = Compile(spec, vocab);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw " << e.what() << " on " << what;
    return false;
  }
  if (!c.ok()) {
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_EQ(std::string(c.status().message()).rfind(std::string(field), 0), 0u)
        << c.status() << " on " << what;
    return false;
  }
  Matcher m(*c);
  const int32_t stops[] = {0};
  std::vector<uint64_t> words((static_cast<size_t>(vocab->vocab_size()) + 63) / 64);
  for (int step = 0; step < 24; ++step) {
    m.WriteMask(words, stops);
    std::vector<int32_t> allowed;
    for (int32_t t = 1; t < vocab->vocab_size(); ++t) {
      if (words[t / 64] >> (t % 64) & 1) allowed.push_back(t);
    }
    if (allowed.empty()) break;  // only the stop token, or nothing after a complete output
    const int32_t token = allowed[rng() % allowed.size()];
    EXPECT_TRUE(m.Advance(token)) << "token " << token << " at step " << step << " on " << what;
  }
  return true;
}

inline ConstraintSpec Spec(Kind kind, std::string text) {
  ConstraintSpec spec;
  spec.kind = kind;
  spec.text = std::move(text);
  return spec;
}

// `text` with one to three random edits: a span deleted or repeated, or a byte of `alphabet`
// put in.
inline std::string Edited(std::string text, std::string_view alphabet, std::mt19937& rng) {
  const int n = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < n && !text.empty(); ++i) {
    const size_t at = rng() % text.size(), len = 1 + rng() % std::min<size_t>(8, text.size() - at);
    switch (rng() % 3) {
      case 0:
        text.erase(at, len);
        break;
      case 1:
        text.insert(at, text.substr(at, len));
        break;
      default:
        text.insert(at, 1, alphabet[rng() % alphabet.size()]);
    }
  }
  return text;
}

}  // namespace llm::constraint::fuzz

#endif  // LLM_TESTS_WORKER_CONSTRAINT_FUZZ_H_
