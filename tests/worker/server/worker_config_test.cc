#include "worker/server/worker_config.h"

#include "gtest/gtest.h"

namespace llm::server {
namespace {

TEST(WorkerConfigTest, BackendKeysReachTheBackendOptions) {
  auto c = LoadWorkerConfig({"--model.path",
                             "random:llama-3-8b:4",
                             "--engine.backend",
                             "cuda",
                             "--engine.device",
                             "1",
                             "--engine.kv_memory_fraction",
                             "0.5",
                             "--engine.cuda_graphs",
                             "false",
                             "--engine.batch_invariant",
                             "true",
                             "--engine.max_context",
                             "4096",
                             "--engine.max_slots",
                             "256",
                             "--engine.max_batch_tokens",
                             "4096",
                             "--engine.max_prefill_tokens_alone",
                             "8192"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_name, "random:llama-3-8b");
  const backend::BackendOptions& b = c->backend;
  EXPECT_EQ(b.model, "random:llama-3-8b:4");
  EXPECT_EQ(b.backend, "cuda");
  EXPECT_EQ(b.device, 1);
  EXPECT_EQ(b.kv_memory_fraction, 0.5);
  EXPECT_FALSE(b.cuda.graphs);
  EXPECT_TRUE(b.cuda.batch_invariant);
  EXPECT_EQ(b.max_context, 4096);
  EXPECT_EQ(b.sizes.max_slots, 256);
  EXPECT_EQ(b.max_prefill_tokens, c->worker.scheduler.max_prefill_tokens);
  EXPECT_EQ(b.max_prefill_tokens_alone, 8192);
  EXPECT_EQ(c->worker.scheduler.max_prefill_tokens_alone, 8192);
  EXPECT_EQ(c->worker.scheduler.max_batch_tokens, 4096);
  // By default a step's tokens are capped only by the slots and the prompt budgets.
  auto d = LoadWorkerConfig({"--model.path", "random:tiny"});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->worker.scheduler.max_batch_tokens, 0);
  EXPECT_EQ(d->worker.scheduler.max_prefill_tokens_alone, 0);  // the backend's
}

// Every switch of runner::CudaSwitchSpecs is a key whose non-default value reaches exactly its
// member of the backend's CudaSwitches.
TEST(WorkerConfigTest, EveryCudaSwitchIsAKeyThatReachesItsMember) {
  const runner::CudaSwitches defaults;
  for (const runner::CudaSwitchSpec& spec : runner::CudaSwitchSpecs()) {
    std::string value;
    if (spec.flag != nullptr) {
      value = defaults.*spec.flag ? "false" : "true";
    } else if (spec.number != nullptr) {
      value = std::to_string(defaults.*spec.number + 1);
    } else {
      value = "true";
    }
    auto c = LoadWorkerConfig({"--model.path", "random:tiny", std::string("--") + spec.key, value});
    ASSERT_TRUE(c.ok()) << spec.key << ": " << c.status();
    runner::CudaSwitches expected = defaults;
    if (spec.flag != nullptr) {
      expected.*spec.flag = !(defaults.*spec.flag);
    } else if (spec.number != nullptr) {
      expected.*spec.number = defaults.*spec.number + 1;
    } else {
      expected.*spec.tristate = true;
    }
    const runner::CudaSwitches& got = c->backend.cuda;
    for (const runner::CudaSwitchSpec& other : runner::CudaSwitchSpecs()) {
      if (other.flag != nullptr) {
        EXPECT_EQ(got.*other.flag, expected.*other.flag) << spec.key << " -> " << other.key;
      } else if (other.number != nullptr) {
        EXPECT_EQ(got.*other.number, expected.*other.number) << spec.key << " -> " << other.key;
      } else {
        EXPECT_EQ(got.*other.tristate, expected.*other.tristate) << spec.key << " -> " << other.key;
      }
    }
  }
}

// engine.cuda_pdl: auto leaves the choice to the runner (by the model); true and false force it.
TEST(WorkerConfigTest, CudaPdlIsAutoTrueOrFalse) {
  auto c = LoadWorkerConfig({"--model.path", "random:tiny"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->backend.cuda.pdl.has_value());
  for (const bool on : {true, false}) {
    c = LoadWorkerConfig(
        {"--model.path", "random:tiny", "--engine.cuda_pdl", on ? "true" : "false"});
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->backend.cuda.pdl, on);
  }
  c = LoadWorkerConfig({"--model.path", "random:tiny", "--engine.cuda_pdl", "sometimes"});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("engine.cuda_pdl"), std::string::npos) << c.status();
}

// engine.cuda_gemv_split_rows_per_sm reaches the backend's options (default 24, 0 turns the
// split off); a negative count is refused with the key named.
TEST(WorkerConfigTest, GemvSplitRowsPerMultiprocessor) {
  auto c = LoadWorkerConfig({"--model.path", "random:tiny"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->backend.cuda.gemv_split_rows_per_sm, 24);
  c = LoadWorkerConfig(
      {"--model.path", "random:tiny", "--engine.cuda_gemv_split_rows_per_sm", "0"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->backend.cuda.gemv_split_rows_per_sm, 0);
  c = LoadWorkerConfig(
      {"--model.path", "random:tiny", "--engine.cuda_gemv_split_rows_per_sm", "-1"});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("engine.cuda_gemv_split_rows_per_sm"), std::string::npos)
      << c.status();
}

TEST(WorkerConfigTest, BadValuesNameTheKey) {
  auto c = LoadWorkerConfig({"--model.path", "random:tiny", "--engine.backend", "tpu"});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("engine.backend"), std::string::npos) << c.status();
  c = LoadWorkerConfig({"--model.path", "random:enormous"});
  EXPECT_NE(c.status().message().find("model.path"), std::string::npos) << c.status();
  c = LoadWorkerConfig({"--model.path", "random:tiny", "--engine.kv_memory_fraction", "1.5"});
  EXPECT_NE(c.status().message().find("engine.kv_memory_fraction"), std::string::npos)
      << c.status();
  for (const char* key : {"--engine.quantization", "--engine.kv_cache_dtype"}) {
    c = LoadWorkerConfig({"--model.path", "random:tiny", key, "int4"});
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_NE(c.status().message().find(key + 2), std::string::npos) << c.status();
  }
}

// The FP8 settings reach the backend's options (both default to the checkpoint's own format).
TEST(WorkerConfigTest, QuantizationAndKvCacheDtype) {
  auto c = LoadWorkerConfig({"--model.path", "random:tiny"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->backend.quantization, "none");
  EXPECT_EQ(c->backend.kv_cache_dtype, "auto");
  c = LoadWorkerConfig({"--model.path", "random:tiny", "--engine.quantization", "fp8",
                        "--engine.kv_cache_dtype", "fp8"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->backend.quantization, "fp8");
  EXPECT_EQ(c->backend.kv_cache_dtype, "fp8");
}

// engine.speculative.* reach both the backend and the scheduler, and bad values name the key.
TEST(WorkerConfigTest, SpeculativeKeys) {
  auto c = LoadWorkerConfig({"--model.path", "random:tiny"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->backend.speculative.enabled());
  c = LoadWorkerConfig({"--model.path", "random:tiny", "--engine.speculative.method", "ngram",
                        "--engine.speculative.num_tokens", "6", "--engine.speculative.ngram_min",
                        "1", "--engine.speculative.ngram_max", "5", "--engine.speculative.adaptive",
                        "false"});
  ASSERT_TRUE(c.ok()) << c.status();
  for (const engine::SpeculativeConfig& s :
       {c->backend.speculative, c->worker.scheduler.speculative}) {
    EXPECT_EQ(s.method, engine::SpeculativeMethod::kNgram);
    EXPECT_EQ(s.num_tokens, 6);
    EXPECT_EQ(s.ngram_min, 1);
    EXPECT_EQ(s.ngram_max, 5);
    EXPECT_FALSE(s.adaptive);
  }
  for (const auto& [args, key] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--engine.speculative.method", "eagle"}, "engine.speculative.method"},
           {{"--engine.speculative.method", "oracle"}, "benchmark-only"},
           {{"--engine.speculative.method", "draft"}, "engine.speculative.draft_model.path"},
           {{"--engine.speculative.method", "ngram", "--engine.speculative.ngram_min", "4",
             "--engine.speculative.ngram_max", "2"},
            "engine.speculative.ngram_max"},
           {{"--engine.speculative.num_tokens", "0"}, "engine.speculative.num_tokens"}}) {
    std::vector<std::string> all = {"--model.path", "random:tiny"};
    all.insert(all.end(), args.begin(), args.end());
    c = LoadWorkerConfig(all);
    EXPECT_FALSE(c.ok()) << key;
    EXPECT_NE(c.status().message().find(key), std::string::npos) << c.status();
  }
}

}  // namespace
}  // namespace llm::server
