// Client constraints reach the compiler unchecked: random mutations of real ones (a schema's
// keyword set to a value of the wrong kind, a subtree replaced, a reference pointed elsewhere;
// a grammar's or a regex's text edited) must each compile or fail with INVALID_ARGUMENT, never
// throw or crash the worker, and the masks of those that compile allow only tokens the
// constraint then takes. LLM_FUZZ_RUNS and LLM_FUZZ_SEED run it longer or elsewhere (when it
// was written: 60,000 runs a test under two seeds clean, and 15,000 under ASan and UBSan).
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "worker/constraint/constraint.h"
#include "worker/constraint/token_table.h"

namespace llm::constraint {
namespace {

using json = nlohmann::json;

int EnvInt(const char* name, int otherwise) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : otherwise;
}

// Schemas that use every keyword the compiler serves, the benchmark's among them.
std::vector<json> Seeds() {
  std::vector<json> seeds;
  std::ifstream in(std::string(LLM_SOURCE_DIR) + "/tests/data/structured/schemas.json");
  EXPECT_TRUE(in.good()) << "tests/data/structured/schemas.json";
  std::stringstream text;
  text << in.rdbuf();
  for (const json& s : json::parse(text.str())) seeds.push_back(s);
  for (const char* s : {
           R"({"$defs":{"N":{"type":"object","properties":{"v":{"type":"integer"},"kids":
              {"type":"array","items":{"$ref":"#/$defs/N"}}},"required":["v"]}},
              "$ref":"#/$defs/N"})",
           R"({"type":"object","properties":{"a":{"type":"integer"}},"anyOf":[{"required":
              ["a"]},{"type":"null"}],"allOf":[{"minProperties":1}]})",
           R"({"type":"object","propertyNames":{"enum":["x","y"]},"additionalProperties":
              {"type":"string","format":"date"},"maxProperties":1})",
           R"({"type":"array","prefixItems":[{"type":"string","pattern":"^[a-z]{2}$"},
              {"type":"number","minimum":0.5,"multipleOf":0.5}],"maxItems":2})",
           R"({"type":"array","uniqueItems":true,"items":{"$ref":"#/definitions/E"},
              "definitions":{"E":{"enum":["a","b",1]}}})",
           R"({"oneOf":[{"const":"x"},{"type":"string","format":"ipv4network"}],
              "discriminator":{"propertyName":"k"}})",
           R"({"type":["string","null"],"minLength":1,"maxLength":3})"}) {
    seeds.push_back(json::parse(s));
  }
  return seeds;
}

// Values of every kind a keyword might be given.
std::vector<json> Pool() {
  std::vector<json> pool = {true, false, nullptr, 0,    1,
                            -1,   2.5,   1e300,   -0.0, 18446744073709551615u};
  for (const char* s : {R"("")",
                        R"("x")",
                        R"("string")",
                        R"("integer")",
                        R"("object")",
                        R"("#/$defs/N")",
                        R"("#")",
                        R"("#/$defs/missing")",
                        R"("^[a-z]+$")",
                        R"("(")",
                        R"("date")",
                        R"("uuid")",
                        R"([])",
                        R"([1])",
                        R"(["a","b"])",
                        R"([{}])",
                        R"([{"type":"string"},false])",
                        R"([["x"]])",
                        R"({})",
                        R"({"type":"string"})",
                        R"({"type":"integer","minimum":3})",
                        R"({"$ref":"#/$defs/N"})",
                        R"({"N":{"type":"string"}})",
                        R"({"a":{}})",
                        R"({"a":{"type":"null"}})",
                        R"({"type":[]})",
                        R"({"enum":[]})",
                        R"({"const":{}})",
                        R"({"anyOf":[]})",
                        R"({"allOf":[{},{}]})",
                        R"({"items":false})",
                        R"({"$ref":1})"}) {
    pool.push_back(json::parse(s));
  }
  return pool;
}

constexpr const char* kKeywords[] = {"type",
                                     "enum",
                                     "const",
                                     "anyOf",
                                     "oneOf",
                                     "allOf",
                                     "$ref",
                                     "properties",
                                     "required",
                                     "additionalProperties",
                                     "items",
                                     "prefixItems",
                                     "minItems",
                                     "maxItems",
                                     "uniqueItems",
                                     "minLength",
                                     "maxLength",
                                     "pattern",
                                     "format",
                                     "minimum",
                                     "maximum",
                                     "multipleOf",
                                     "exclusiveMinimum",
                                     "propertyNames",
                                     "patternProperties",
                                     "minProperties",
                                     "maxProperties",
                                     "$defs",
                                     "definitions",
                                     "discriminator"};

// Every node of `j`, the root first.
void Nodes(json& j, std::vector<json*>& out) {
  out.push_back(&j);
  if (j.is_object()) {
    for (auto& [k, v] : j.items()) Nodes(v, out);
  } else if (j.is_array()) {
    for (json& v : j) Nodes(v, out);
  }
}

// One to three mutations of `s`: a node replaced by a pool value, or a keyword of a random
// object set to one.
json Mutated(json s, const std::vector<json>& pool, std::mt19937& rng) {
  const int n = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < n; ++i) {
    std::vector<json*> nodes;
    Nodes(s, nodes);
    json* node = nodes[rng() % nodes.size()];
    const json& value = pool[rng() % pool.size()];
    if (node->is_object() && rng() % 2 == 0) {
      (*node)[kKeywords[rng() % std::size(kKeywords)]] = value;
    } else if (node != &s) {
      *node = value;
    }
  }
  return s;
}

// Every byte, and a few longer tokens, so any output can be spelled.
std::shared_ptr<const TokenTable> Vocabulary() {
  std::vector<std::string> bytes = {""};  // id 0: the stop token
  for (int b = 1; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  for (const char* t : {"\"a\"", "true", "null", "{\"", "\":", "\",\"", "12", "-0.5", "ab"}) {
    bytes.push_back(t);
  }
  return std::make_shared<TokenTable>(bytes);
}

// Compiled as the worker compiles it (an error: INVALID_ARGUMENT naming the field), then a
// few random tokens of its masks taken: each one the mask allows must be one the constraint
// takes. Whether the spec was served.
bool Compiled(const ConstraintSpec& spec, const std::shared_ptr<const TokenTable>& vocab,
              std::mt19937& rng) {
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> c;
  try {
    c = Compile(spec, vocab);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw " << e.what() << " on " << spec.text;
    return false;
  }
  if (!c.ok()) {
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << spec.text;
    EXPECT_NE(c.status().message().find("constraint."), std::string::npos)
        << c.status() << " on " << spec.text;
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
    EXPECT_TRUE(m.Advance(token)) << "token " << token << " at step " << step << " on "
                                  << spec.text;
  }
  return true;
}

ConstraintSpec Spec(Kind kind, std::string text) {
  ConstraintSpec spec;
  spec.kind = kind;
  spec.text = std::move(text);
  return spec;
}

// `text` with one to three random edits: a span deleted or repeated, or a byte of `alphabet`
// put in.
std::string Edited(std::string text, std::string_view alphabet, std::mt19937& rng) {
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

TEST(ConstraintFuzzTest, MutatedSchemasCompileOrFailCleanly) {
  const std::vector<json> seeds = Seeds(), pool = Pool();
  const auto vocab = Vocabulary();
  const int runs = EnvInt("LLM_FUZZ_RUNS", 3000);
  std::mt19937 rng(EnvInt("LLM_FUZZ_SEED", 20261129));
  int served = 0;
  for (int i = 0; i < runs && !HasFailure(); ++i) {
    const std::string schema = Mutated(seeds[i % seeds.size()], pool, rng).dump();
    served += Compiled(Spec(Kind::kJsonSchema, schema), vocab, rng);
  }
  // The mutations must leave many schemas served, or they test only the first check.
  std::cout << served << " of " << runs << " served\n";
  EXPECT_GT(served, runs / 10);
}

TEST(ConstraintFuzzTest, EditedGrammarsAndRegexesCompileOrFailCleanly) {
  std::ifstream in(std::string(LLM_SOURCE_DIR) + "/tests/data/structured/grammars.json");
  ASSERT_TRUE(in.good()) << "tests/data/structured/grammars.json";
  std::stringstream text;
  text << in.rdbuf();
  std::vector<std::string> grammars;
  for (const json& g : json::parse(text.str())) grammars.push_back(g.get<std::string>());
  const std::vector<std::string> regexes = {R"([a-z]+@[a-z]+\.(com|org))",  R"((\d{3}-){2}\d{4})",
                                            R"(\w+( \w+)*[.!?])",           R"([^"\\]{0,12}x?)",
                                            R"((ab|cd){2,5}|[\x00-\x1f]+)", R"(\p{L}+|\.\*)"};
  const auto vocab = Vocabulary();
  const int runs = EnvInt("LLM_FUZZ_RUNS", 3000);
  std::mt19937 rng(EnvInt("LLM_FUZZ_SEED", 20261129));
  int served = 0;
  for (int i = 0; i < runs && !HasFailure(); ++i) {
    const bool grammar = i % 2 == 0;
    const std::string& seed =
        grammar ? grammars[(i / 2) % grammars.size()] : regexes[(i / 2) % regexes.size()];
    const std::string edited =
        Edited(seed, grammar ? "()[]|*+?\"-:= \nabx{}^.#" : "()[]|*+?{},\\^$-.dwp1", rng);
    served += Compiled(Spec(grammar ? Kind::kGrammar : Kind::kRegex, edited), vocab, rng);
  }
  std::cout << served << " of " << runs << " served\n";
  EXPECT_GT(served, runs / 10);
}

}  // namespace
}  // namespace llm::constraint
