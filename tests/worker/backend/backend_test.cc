#include "worker/backend/backend.h"

#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "worker/model/config.h"
#include "worker/model/fp8_writer.h"
#include "worker/model/safetensors.h"

namespace llm::backend {
namespace {

TEST(BackendTest, CpuRandomModelHasTheShapeAndASyntheticTokenizer) {
  BackendOptions o;
  o.model = "random:tiny:3";
  o.backend = "cpu";
  o.sizes.max_slots = 3;
  o.sizes.kv_blocks = 40;
  o.cpu_threads = 1;
  o.max_context = 100;
  auto b = CreateBackend(o);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->backend, "cpu");
  EXPECT_TRUE(b->source.synthetic());
  EXPECT_EQ(b->tokenizer->vocab_size(), b->config.vocab_size);
  const runner::RunnerInfo& info = b->runner->info();
  EXPECT_EQ(info.sizes.max_slots, 3);
  EXPECT_EQ(info.sizes.kv_blocks, 40);
  EXPECT_EQ(info.max_context, 100);
  EXPECT_EQ(info.device, "cpu (1 threads)");
  EXPECT_TRUE(info.pci_bus_id.empty());
}

// engine.quantization and engine.kv_cache_dtype settle into the backend's scheme and cache spec
// (the CPU backend serves both); the checkpoint's own (bf16, no KV scheme) under auto.
TEST(BackendTest, Fp8SettingsReachTheCpuBackend) {
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  BackendOptions o;
  o.model = llm::testing::SharedPath("models/tinystories-656k");
  o.backend = "cpu";
  o.cpu_threads = 1;
  auto b = CreateBackend(o);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE(b->quant.quantized());
  EXPECT_FALSE(b->kv.fp8());
  o.quantization = "fp8";
  o.kv_cache_dtype = "fp8";
  b = CreateBackend(o);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->quant.weights, model::WeightScaling::kChannel);
  EXPECT_TRUE(b->kv.fp8());
  EXPECT_EQ(b->kv.k_scale, std::vector<float>(2, 1.0f));  // no scales in the checkpoint
  o.kv_cache_dtype = "e5m2";
  b = CreateBackend(o);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("engine.kv_cache_dtype"), std::string::npos) << b.status();
}

TEST(BackendTest, CheckpointWithTheSharedModel) {
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  BackendOptions o;
  o.model = llm::testing::SharedPath("models/tinystories-656k");
  o.backend = "auto";
  o.cpu_threads = 1;
  auto b = CreateBackend(o);
  ASSERT_TRUE(b.ok()) << b.status();
  if (!CudaBuilt()) {
    EXPECT_EQ(b->backend, "cpu");
  }
  EXPECT_EQ(b->source.name(), "tinystories-656k");
  EXPECT_EQ(b->config.vocab_size, b->runner->info().vocab_size);
}

TEST(BackendTest, ErrorsNameTheOption) {
  BackendOptions o;
  o.model = "random:tiny";
  o.backend = "tpu";
  auto b = CreateBackend(o);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("engine.backend: 'tpu'"), std::string::npos) << b.status();

  o.backend = "cpu";
  o.max_context = 1 << 24;  // clamped to the model's limit without a word
  b = CreateBackend(o);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("engine.max_context: 16777216 is more than the model's"),
            std::string::npos)
      << b.status();

  o.max_context = 0;
  o.kv_cache_mb = 0;
  o.sizes.kv_blocks = 0;
  b = CreateBackend(o);
  EXPECT_NE(b.status().message().find("engine.kv_cache_mb"), std::string::npos) << b.status();

  o = BackendOptions{};
  o.model = "/no/such/model";
  b = CreateBackend(o);
  EXPECT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("/no/such/model"), std::string::npos) << b.status();

  // A tokenizer larger than the model's vocabulary.
  LLM_REQUIRE_SHARED("tokenizers/llama3");
  o = BackendOptions{};
  o.model = "random:tiny";
  o.backend = "cpu";
  o.tokenizer = llm::testing::SharedPath("tokenizers/llama3");
  b = CreateBackend(o);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("tokenizer"), std::string::npos) << b.status();
}

// A draft model must share the model's vocabulary, on either backend; the refusal names the
// key.
TEST(BackendTest, SpeculativeDecodingRefusalsNameTheKey) {
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  BackendOptions o;
  o.model = llm::testing::SharedPath("models/tinystories-656k");
  o.backend = "cpu";
  o.cpu_threads = 1;
  o.speculative.method = engine::SpeculativeMethod::kDraft;
  o.speculative.draft_model = "random:tiny";  // another vocabulary
  auto b = CreateBackend(o);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("engine.speculative.draft_model.path"), std::string::npos)
      << b.status();
  EXPECT_NE(b.status().message().find("vocabulary"), std::string::npos) << b.status();
  o.speculative.draft_model = "/no/such/draft";
  b = CreateBackend(o);
  EXPECT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("engine.speculative.draft_model.path"), std::string::npos)
      << b.status();
  // The model as its own draft loads.
  o.speculative.draft_model = o.model;
  b = CreateBackend(o);
  EXPECT_TRUE(b.ok()) << b.status();
  // An FP8 draft checkpoint is refused: a draft runs 16-bit weights.
  {
    auto config = model::LoadModelConfig(o.model);
    ASSERT_TRUE(config.ok()) << config.status();
    auto store = model::TensorStore::Open(o.model);
    ASSERT_TRUE(store.ok()) << store.status();
    const std::string fp8 = llm::testing::MakeTempDir("fp8draft");
    ASSERT_TRUE(
        model::WriteFp8Checkpoint(*config, **store, model::WeightScaling::kChannel, fp8, nullptr)
            .ok());
    o.speculative.draft_model = fp8;
    b = CreateBackend(o);
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << b.status();
    EXPECT_NE(b.status().message().find("FP8"), std::string::npos) << b.status();
    o.speculative.draft_model = o.model;
  }

  // The CUDA backend runs a draft model too: one of another vocabulary is refused there as
  // well, naming the key, before a device is needed; the model as its own draft loads where a
  // GPU is, and elsewhere fails for the lack of one.
  o.backend = "cuda";
  o.speculative.draft_model = "random:tiny";
  b = CreateBackend(o);
  if (CudaBuilt()) {
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << b.status();
    EXPECT_NE(b.status().message().find("engine.speculative.draft_model.path"), std::string::npos)
        << b.status();
  }
  o.speculative.draft_model = o.model;
  b = CreateBackend(o);
  if (!b.ok()) {
    EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition) << b.status();
  }
}

// Where the CUDA backend is built but no GPU is usable, asking for it says why; where it is
// not built, asking for it says so.
TEST(BackendTest, CudaWithoutADeviceIsAClearError) {
  BackendOptions o;
  o.model = "random:tiny";
  o.backend = "cuda";
  auto b = CreateBackend(o);
  if (b.ok()) {
    EXPECT_EQ(b->backend, "cuda");  // a GPU machine
    return;
  }
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition) << b.status();
  if (CudaBuilt()) {
    EXPECT_NE(b.status().message().find("CUDA"), std::string::npos) << b.status();
  } else {
    EXPECT_NE(b.status().message().find("LLM_ENABLE_CUDA=OFF"), std::string::npos);
  }
}

}  // namespace
}  // namespace llm::backend
