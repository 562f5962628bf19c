// FP8 checkpoints written by an independent writer (write_fp8_checkpoints.py: numpy,
// ml_dtypes and safetensors, none of our C++), one per format users bring, made from
// tinystories-656k by the CTest fixture runner.fp8_checkpoints_written into the folder
// $LLM_FP8_CHECKPOINTS. For each: the scheme read from its config files, every FP8 weight as
// our loader dequantises it against the writer's own dequantisation (bit for bit), and the CPU
// forward against the double-precision reference forward given the writer's weights (measured:
// relative L2 below 1e-6 for every format).
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/mapped_file.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"
#include "tests/worker/runner/reference_forward.h"
#include "worker/model/linear_weights.h"
#include "worker/model/quant_scheme.h"
#include "worker/runner/cpu_model.h"

namespace llm::runner {
namespace {

using model::ActivationScaling;
using model::WeightScaling;
using testing::Mat;
using testing::RefActivations;

struct Format {
  const char* name;
  model::QuantScheme::Format format;
  WeightScaling weights;
  ActivationScaling activations;
};

constexpr Format kFormats[] = {
    {"ct-channel", model::QuantScheme::Format::kCompressedTensors, WeightScaling::kChannel,
     ActivationScaling::kToken},
    {"ct-tensor", model::QuantScheme::Format::kCompressedTensors, WeightScaling::kTensor,
     ActivationScaling::kStatic},
    {"ct-block", model::QuantScheme::Format::kCompressedTensors, WeightScaling::kBlock,
     ActivationScaling::kGroup},
    {"hf-block", model::QuantScheme::Format::kHfFp8, WeightScaling::kBlock,
     ActivationScaling::kGroup},
    {"hf-tensor", model::QuantScheme::Format::kHfFp8, WeightScaling::kTensor,
     ActivationScaling::kStatic},
    {"modelopt", model::QuantScheme::Format::kModelOpt, WeightScaling::kTensor,
     ActivationScaling::kStatic},
};

std::string CheckpointsDir() {
  const char* dir = std::getenv("LLM_FP8_CHECKPOINTS");
  return dir == nullptr ? "" : dir;
}

class Fp8CheckpointTest : public ::testing::TestWithParam<Format> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(CheckpointsDir().empty())
        << "LLM_FP8_CHECKPOINTS is not set: run through ctest, whose fixture "
           "runner.fp8_checkpoints_written writes the checkpoints";
    dir_ = CheckpointsDir() + "/" + GetParam().name;
    ASSERT_TRUE(std::filesystem::exists(dir_ + "/model.safetensors"))
        << dir_ << ": missing; did write_fp8_checkpoints.py run?";
  }
  std::string dir_;
};

TEST_P(Fp8CheckpointTest, TheSchemeIsTheFormatsAndEveryWeightDequantisesAsItsWriterSays) {
  auto scheme = model::LoadQuantScheme(dir_);
  ASSERT_TRUE(scheme.ok()) << scheme.status();
  EXPECT_EQ(scheme->format, GetParam().format);
  EXPECT_EQ(scheme->weights, GetParam().weights);
  EXPECT_EQ(scheme->activations, GetParam().activations);
  auto config = model::LoadModelConfig(dir_);
  ASSERT_TRUE(config.ok()) << config.status();
  auto store = model::TensorStore::Open(dir_);
  ASSERT_TRUE(store.ok()) << store.status();
  auto file = MappedFile::Open(dir_ + "/expected.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  auto expected = model::ParseSafetensors(**file);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_EQ(expected->size(), 7u * static_cast<size_t>(config->num_layers));
  size_t compared = 0;
  for (const model::TensorSpec& spec : model::LlamaTensorSpecs(*config)) {
    if (spec.kind != model::TensorKind::kLinear) continue;
    const model::TensorView* want = nullptr;
    for (const auto& v : *expected) want = v.name == spec.name ? &v : want;
    ASSERT_NE(want, nullptr) << spec.name;
    auto w = model::GetLinearWeight(**store, *scheme, spec);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(w->scaling, GetParam().weights) << spec.name;
    std::vector<float> row(static_cast<size_t>(w->in));
    const auto* rows = reinterpret_cast<const float*>(want->data);
    for (int64_t r = 0; r < w->out; ++r) {
      w->RowToF32(r, row.data());
      for (int64_t c = 0; c < w->in; ++c) {
        ASSERT_EQ(row[c], rows[r * w->in + c]) << spec.name << " [" << r << ", " << c << "]";
      }
    }
    ++compared;
  }
  EXPECT_EQ(compared, 7u * static_cast<size_t>(config->num_layers));
}

// The CPU forward of the FP8 checkpoint against the double-precision reference forward with the
// writer's dequantised weights and its own rounding of the products' inputs. The gap is fp32
// against fp64; an input element that fell on the other side of an E4M3 rounding boundary in
// the two would move by a step (1/16 of itself), which the bound allows for.
TEST_P(Fp8CheckpointTest, TheCpuForwardMatchesTheReferenceForward) {
  auto format = ReadFileToString(dir_ + "/format.json");
  ASSERT_TRUE(format.ok()) << format.status();
  const double static_scale = nlohmann::json::parse(*format)["static_input_scale"];
  ThreadPool pool(2);
  auto cpu = CpuModel::Load(dir_, &pool);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto store = model::TensorStore::Open(dir_);
  ASSERT_TRUE(store.ok());
  auto dequantised = model::ReadSafetensors(dir_ + "/expected.safetensors");
  ASSERT_TRUE(dequantised.ok()) << dequantised.status();
  auto weights = model::TensorStore::FromTensors("expected", *std::move(dequantised));
  ASSERT_TRUE(weights.ok());
  RefActivations act;
  act.mode = GetParam().activations == ActivationScaling::kToken   ? RefActivations::Mode::kToken
             : GetParam().activations == ActivationScaling::kGroup ? RefActivations::Mode::kGroup
                                                                   : RefActivations::Mode::kStatic;
  act.static_scale = static_scale;
  testing::Reference ref((*cpu)->config(), **store, weights->get(), act);
  const std::vector<int32_t> ids = {1, 80, 147, 201, 282, 57, 313, 598, 303, 1049, 1468, 267, 628};
  const std::vector<float> logits = testing::CpuLastLogits(**cpu, ids);
  const Mat want = ref.LastLogits(ids);
  ASSERT_EQ(logits.size(), want.size());
  double diff = 0, norm = 0, worst = 0;
  size_t argmax = 0, want_argmax = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (logits[i] - want[i]) * (logits[i] - want[i]);
    norm += want[i] * want[i];
    worst = std::max(worst, std::fabs(logits[i] - want[i]));
    if (logits[i] > logits[argmax]) argmax = i;
    if (want[i] > want[want_argmax]) want_argmax = i;
  }
  const double rel = std::sqrt(diff / norm);
  std::printf("%s: relative L2 %.3g, largest difference %.3g\n", GetParam().name, rel, worst);
  EXPECT_LT(rel, 1e-4) << "max |diff| " << worst;
  EXPECT_EQ(argmax, want_argmax);
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8CheckpointTest, ::testing::ValuesIn(kFormats),
                         [](const auto& info) {
                           std::string name = info.param.name;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

}  // namespace
}  // namespace llm::runner
