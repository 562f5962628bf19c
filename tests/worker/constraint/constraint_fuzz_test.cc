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
#include "tests/worker/constraint/fuzz.h"
#include "worker/constraint/constraint.h"
#include "worker/constraint/token_table.h"

namespace llm::constraint::fuzz {
namespace {

using json = nlohmann::json;

// The JSON document at `path` in the source tree.
json ReadJson(const std::string& path) {
  std::ifstream in(std::string(LLM_SOURCE_DIR) + "/" + path);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

// Schemas that use every keyword the compiler serves, the benchmark's among them.
std::vector<json> Seeds() {
  std::vector<json> seeds;
  for (const json& s : ReadJson("tests/data/structured/schemas.json")) seeds.push_back(s);
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

TEST(ConstraintFuzzTest, MutatedSchemasCompileOrFailCleanly) {
  const std::vector<json> seeds = Seeds();
  const auto vocab = Vocabulary();
  const int runs = EnvInt("LLM_FUZZ_RUNS", 3000);
  std::mt19937 rng(EnvInt("LLM_FUZZ_SEED", 20261129));
  int served = 0;
  for (int i = 0; i < runs && !HasFailure(); ++i) {
    const std::string schema = Mutated(seeds[i % seeds.size()], rng).dump();
    served += Compiled(Spec(Kind::kJsonSchema, schema), vocab, rng, schema);
  }
  // The mutations must leave many schemas served, or they test only the first check.
  std::cout << served << " of " << runs << " served\n";
  EXPECT_GT(served, runs / 10);
}

TEST(ConstraintFuzzTest, EditedGrammarsAndRegexesCompileOrFailCleanly) {
  std::vector<std::string> grammars;
  for (const json& g : ReadJson("tests/data/structured/grammars.json"))
    grammars.push_back(g.get<std::string>());
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
    served += Compiled(Spec(grammar ? Kind::kGrammar : Kind::kRegex, edited), vocab, rng, edited);
  }
  std::cout << served << " of " << runs << " served\n";
  EXPECT_GT(served, runs / 10);
}

}  // namespace
}  // namespace llm::constraint::fuzz
