// llm-cli make-model writes a loadable, deterministic checkpoint with a working tokenizer.
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"
#include "worker/frontend/tokenizer.h"
#include "worker/model/config.h"
#include "worker/model/llama_tensors.h"
#include "worker/model/safetensors.h"

namespace llm {
namespace {

using llm::testing::BinPath;
using llm::testing::RunCommand;

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

TEST(MakeModelTest, TinyIsDeterministicLoadableAndGenerates) {
  const std::string a = llm::testing::MakeTempDir("a"), b = llm::testing::MakeTempDir("b"),
                    c = llm::testing::MakeTempDir("c");
  for (const auto& [dir, seed] : {std::pair{a, "1"}, std::pair{b, "1"}, std::pair{c, "2"}}) {
    const auto r = RunCommand(
        {BinPath("llm-cli"), "make-model", "--shape", "tiny", "--out", dir, "--seed", seed});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  EXPECT_EQ(Slurp(a + "/model.safetensors"), Slurp(b + "/model.safetensors"));
  EXPECT_NE(Slurp(a + "/model.safetensors"), Slurp(c + "/model.safetensors"));
  EXPECT_EQ(Slurp(a + "/tokenizer.json"), Slurp(c + "/tokenizer.json"));

  auto config = model::LoadModelConfig(a);
  ASSERT_TRUE(config.ok()) << config.status();
  auto store = model::TensorStore::Open(a);
  ASSERT_TRUE(store.ok()) << store.status();
  for (const auto& spec : model::LlamaTensorSpecs(*config)) {
    auto v = model::GetChecked(**store, spec);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ((*v)->dtype, model::DType::kBF16);
  }
  auto tok = frontend::Tokenizer::Load(a);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), config->vocab_size);
  EXPECT_EQ((*tok)->bos_id(), config->bos_token_id);
  const auto ids = (*tok)->Encode("Hello there, the world!", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->front(), config->bos_token_id);
  EXPECT_EQ(*(*tok)->Decode(*ids, true), "Hello there, the world!");

  const auto r = RunCommand({BinPath("llm-cli"), "generate", "--model", a, "--prompt", "Hi",
                             "--max-tokens", "12", "--seed", "3", "--ids", "--ignore-eos"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["generated_ids"].size(), 12u);
}

// random:<shape>:<seed> builds, in memory, the model make-model writes with that seed: the same
// weights and tokenizer, so the same tokens (seeded sampling, so every logit matters).
TEST(MakeModelTest, RandomModelIsTheMadeCheckpoint) {
  const std::string dir = llm::testing::MakeTempDir("made");
  auto r = RunCommand(
      {BinPath("llm-cli"), "make-model", "--shape", "tiny", "--out", dir, "--seed", "5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto generate = [](const std::string& model) {
    return RunCommand({BinPath("llm-cli"), "generate", "--model", model, "--prompt",
                       "Once upon a time", "--max-tokens", "24", "--temperature", "0.8", "--seed",
                       "9", "--ids", "--ignore-eos"});
  };
  const auto from_files = generate(dir);
  const auto from_seed = generate("random:tiny:5");
  const auto other_seed = generate("random:tiny:6");
  ASSERT_EQ(from_files.exit_code, 0) << from_files.err;
  ASSERT_EQ(from_seed.exit_code, 0) << from_seed.err;
  ASSERT_EQ(other_seed.exit_code, 0) << other_seed.err;
  EXPECT_EQ(nlohmann::json::parse(from_files.out), nlohmann::json::parse(from_seed.out));
  EXPECT_NE(nlohmann::json::parse(from_files.out)["generated_ids"],
            nlohmann::json::parse(other_seed.out)["generated_ids"]);

  r = RunCommand({BinPath("llm-cli"), "generate", "--model", "random:nonesuch", "--prompt", "x"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("unknown model shape 'nonesuch'"), std::string::npos) << r.err;
  r = RunCommand({BinPath("llm-cli"), "generate", "--model", "random:tiny:x1", "--prompt", "x"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("seed 'x1'"), std::string::npos) << r.err;
}

TEST(MakeModelTest, BadArgumentsAreNamed) {
  auto r = RunCommand({BinPath("llm-cli"), "make-model", "--shape", "gpt-5", "--out", "/tmp/x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("gpt-5"), std::string::npos);
  EXPECT_NE(r.err.find("llama-3.2-1b"), std::string::npos);  // lists the known shapes
  r = RunCommand(
      {BinPath("llm-cli"), "make-model", "--shape", "tiny", "--out", "/tmp/x", "--dtype", "int4"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--dtype"), std::string::npos);
}

}  // namespace
}  // namespace llm
