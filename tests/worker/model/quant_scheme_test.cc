#include "worker/model/quant_scheme.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/model/fp8_writer.h"

namespace llm::model {
namespace {

using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kSource[] = "ckpt/config.json";

// compressed-tensors' FP8_DYNAMIC preset as llm-compressor writes it.
json CompressedTensors() {
  return json::parse(R"({"quantization_config": {
    "quant_method": "compressed-tensors", "format": "float-quantized",
    "quantization_status": "compressed", "kv_cache_scheme": null, "ignore": ["lm_head"],
    "config_groups": {"group_0": {"targets": ["Linear"], "output_activations": null,
      "weights": {"num_bits": 8, "type": "float", "symmetric": true, "strategy": "channel",
                  "dynamic": false, "group_size": null, "block_structure": null},
      "input_activations": {"num_bits": 8, "type": "float", "symmetric": true,
                            "strategy": "token", "dynamic": true}}}}})");
}

absl::StatusOr<QuantScheme> Parse(const json& config) {
  return ParseQuantScheme(config, kSource, nullptr, "");
}

json& Group(json& j) { return j["quantization_config"]["config_groups"]["group_0"]; }

TEST(QuantSchemeTest, NoQuantizationConfigIsSixteenBit) {
  auto s = Parse(json::object());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->quantized());
  EXPECT_FALSE(s->Quantizes("model.layers.0.self_attn.q_proj"));
}

TEST(QuantSchemeTest, CompressedTensorsChannelTokenIgnoresTheHead) {
  auto s = Parse(CompressedTensors());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->format, QuantScheme::Format::kCompressedTensors);
  EXPECT_EQ(s->weights, WeightScaling::kChannel);
  EXPECT_EQ(s->activations, ActivationScaling::kToken);
  EXPECT_EQ(s->weight_scale_name, "weight_scale");
  EXPECT_TRUE(s->Quantizes("model.layers.3.mlp.down_proj"));
  EXPECT_FALSE(s->Quantizes("lm_head"));
  EXPECT_THAT(s->Describe(),
              AllOf(HasSubstr("channel"), HasSubstr("compressed-tensors"), HasSubstr(kSource)));
}

TEST(QuantSchemeTest, CompressedTensorsStaticTensorAndBlockGroup) {
  json j = CompressedTensors();
  Group(j)["weights"]["strategy"] = "tensor";
  Group(j)["input_activations"] = {
      {"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}, {"dynamic", false}};
  auto s = Parse(j);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->weights, WeightScaling::kTensor);
  EXPECT_EQ(s->activations, ActivationScaling::kStatic);

  j = CompressedTensors();
  Group(j)["weights"]["strategy"] = "block";
  Group(j)["weights"]["block_structure"] = {128, 128};
  Group(j)["input_activations"]["strategy"] = "group";
  Group(j)["input_activations"]["group_size"] = 128;
  s = Parse(j);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->weights, WeightScaling::kBlock);
  EXPECT_EQ(s->activations, ActivationScaling::kGroup);
}

// What is not served is refused naming the file, the field and the value.
TEST(QuantSchemeTest, CompressedTensorsRefusesWhatIsNotServed) {
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {"int weights",
       [](json& j) { Group(j)["weights"]["type"] = "int"; },
       {"group_0.weights.type", "\"int\""}},
      {"4 bits", [](json& j) { Group(j)["weights"]["num_bits"] = 4; }, {"weights.num_bits", "4"}},
      {"group strategy",
       [](json& j) { Group(j)["weights"]["strategy"] = "group"; },
       {"weights.strategy", "\"group\"", "tensor, channel, block"}},
      {"weight-only",
       [](json& j) { Group(j)["input_activations"] = nullptr; },
       {"input_activations", "not served"}},
      {"dynamic per tensor",
       [](json& j) { Group(j)["input_activations"]["strategy"] = "tensor"; },
       {"input_activations", "\"tensor\" with dynamic true"}},
      {"other format",
       [](json& j) { j["quantization_config"]["format"] = "pack-quantized"; },
       {"quantization_config.format", "\"pack-quantized\""}},
      {"two groups",
       [](json& j) { j["quantization_config"]["config_groups"]["group_1"] = Group(j); },
       {"config_groups", "2 groups"}},
      {"block with tokens",
       [](json& j) {
         Group(j)["weights"]["strategy"] = "block";
         Group(j)["weights"]["block_structure"] = {128, 128};
       },
       {"block", "token"}},
      {"64x64 blocks",
       [](json& j) {
         Group(j)["weights"]["strategy"] = "block";
         Group(j)["weights"]["block_structure"] = {64, 64};
       },
       {"weights.block_structure", "[64,64]"}},
      {"other method",
       [](json& j) { j["quantization_config"]["quant_method"] = "gptq"; },
       {"quantization_config.quant_method", "\"gptq\""}},
      {"not frozen",
       [](json& j) { j["quantization_config"]["quantization_status"] = "frozen"; },
       {"quantization_status", "\"frozen\""}},
  };
  for (const Case& c : cases) {
    json j = CompressedTensors();
    c.edit(j);
    auto s = Parse(j);
    ASSERT_FALSE(s.ok()) << c.what;
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(kSource)) << c.what;
    for (const std::string& part : c.message) {
      EXPECT_THAT(std::string(s.status().message()), HasSubstr(part)) << c.what;
    }
  }
}

TEST(QuantSchemeTest, HuggingFaceFineGrainedAndAutoFp8) {
  auto s = Parse(json::parse(R"({"quantization_config": {"activation_scheme": "dynamic",
    "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128],
    "modules_to_not_convert": ["lm_head", "mlp.gate."]}})"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->weights, WeightScaling::kBlock);
  EXPECT_EQ(s->activations, ActivationScaling::kGroup);
  EXPECT_EQ(s->weight_scale_name, "weight_scale_inv");
  EXPECT_FALSE(s->Quantizes("model.layers.0.mlp.gate.proj"));  // a substring, as transformers
  EXPECT_TRUE(s->Quantizes("model.layers.0.mlp.gate_proj"));

  s = Parse(json::parse(R"({"quantization_config": {"quant_method": "fp8",
    "activation_scheme": "static", "ignored_layers": ["lm_head"]}})"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->weights, WeightScaling::kTensor);
  EXPECT_EQ(s->activations, ActivationScaling::kStatic);

  for (const char* bad : {R"({"quant_method": "fp8", "fmt": "e5m2"})",
                          R"({"quant_method": "fp8", "weight_block_size": [64, 64]})",
                          R"({"quant_method": "fp8", "activation_scheme": "static",
                              "weight_block_size": [128, 128]})",
                          R"({"quant_method": "fp8", "scale_fmt": "ue8m0",
                              "weight_block_size": [128, 128]})"}) {
    s = Parse({{"quantization_config", json::parse(bad)}});
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("quantization_config.")) << bad;
  }
}

TEST(QuantSchemeTest, ModelOptFromHfQuantConfigOrConfigJson) {
  const json hf = json::parse(R"({"producer": {"name": "modelopt", "version": "0.19.0"},
    "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8",
                     "exclude_modules": ["lm_head", "model.layers.1.*"]}})");
  auto s = ParseQuantScheme(json::object(), kSource, &hf, "ckpt/hf_quant_config.json");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->format, QuantScheme::Format::kModelOpt);
  EXPECT_EQ(s->weights, WeightScaling::kTensor);
  EXPECT_EQ(s->activations, ActivationScaling::kStatic);
  EXPECT_FALSE(s->Quantizes("model.layers.1.mlp.up_proj"));  // fnmatch
  EXPECT_TRUE(s->Quantizes("model.layers.11.mlp.up_proj"));
  EXPECT_EQ(s->source, "ckpt/hf_quant_config.json");

  s = Parse(json::parse(R"({"quantization_config": {"quant_method": "modelopt",
    "quant_algo": "FP8_PER_CHANNEL_PER_TOKEN", "ignore": ["lm_head"]}})"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->weights, WeightScaling::kChannel);
  EXPECT_EQ(s->activations, ActivationScaling::kToken);

  const json nvfp4 = json::parse(R"({"quantization": {"quant_algo": "NVFP4"}})");
  s = ParseQuantScheme(json::object(), kSource, &nvfp4, "ckpt/hf_quant_config.json");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()),
              AllOf(HasSubstr("hf_quant_config.json"), HasSubstr("quantization.quant_algo"),
                    HasSubstr("\"NVFP4\"")));
}

TEST(QuantSchemeTest, RegexIgnoreEntriesMatchFromTheStart) {
  json j = CompressedTensors();
  j["quantization_config"]["ignore"] = {"re:.*lm_head", "re:model\\.layers\\.0\\..*"};
  auto s = Parse(j);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->Quantizes("lm_head"));
  EXPECT_FALSE(s->Quantizes("model.layers.0.mlp.up_proj"));
  EXPECT_TRUE(s->Quantizes("model.layers.10.mlp.up_proj"));
  j["quantization_config"]["ignore"] = {"re:(unclosed"};
  EXPECT_FALSE(Parse(j).ok());
}

// A stacked product (q, k, v) is quantised whole or not at all.
TEST(QuantSchemeTest, AProductIsQuantisedWholeOrNotAtAll) {
  json j = CompressedTensors();
  j["quantization_config"]["ignore"] = {"lm_head", "model.layers.0.self_attn.k_proj"};
  auto s = Parse(j);
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string p = "model.layers.0.self_attn.";
  auto q = ProductQuantized(*s, {p + "q_proj", p + "k_proj", p + "v_proj"});
  ASSERT_FALSE(q.ok());
  EXPECT_THAT(std::string(q.status().message()), HasSubstr("k_proj"));
  q = ProductQuantized(*s, {"model.layers.1.mlp.down_proj"});
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(*q);
  q = ProductQuantized(*s, {"lm_head"});
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(*q);
}

TEST(QuantSchemeTest, TheQuantizationOption) {
  auto s = ApplyQuantizationOption("fp8", QuantScheme());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->format, QuantScheme::Format::kOnline);
  EXPECT_EQ(s->weights, WeightScaling::kChannel);
  EXPECT_EQ(s->activations, ActivationScaling::kToken);
  EXPECT_FALSE(s->Quantizes("lm_head"));
  EXPECT_TRUE(ApplyQuantizationOption("none", QuantScheme()).ok());
  auto bad = ApplyQuantizationOption("int4", QuantScheme());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              AllOf(HasSubstr("engine.quantization"), HasSubstr("int4")));
  auto twice = ApplyQuantizationOption("fp8", *Parse(CompressedTensors()));
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(std::string(twice.status().message()), HasSubstr("quantised already"));
}

// A checkpoint's FP8 KV cache: compressed-tensors' kv_cache_scheme, ModelOpt's
// kv_cache_quant_algo (or its config.json kv_cache_scheme); anything else refused by name.
TEST(QuantSchemeTest, KvCacheSchemes) {
  json j = CompressedTensors();
  EXPECT_FALSE(Parse(j)->kv_cache_fp8);  // null
  j["quantization_config"]["kv_cache_scheme"] = {{"num_bits", 8},
                                                 {"type", "float"},
                                                 {"strategy", "tensor"},
                                                 {"dynamic", false},
                                                 {"symmetric", true}};
  auto s = Parse(j);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->kv_cache_fp8);
  j["quantization_config"]["kv_cache_scheme"]["type"] = "int";
  s = Parse(j);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()),
              AllOf(HasSubstr("kv_cache_scheme.type"), HasSubstr("\"int\"")));
  const json hf = json::parse(R"({"quantization": {"quant_algo": "FP8",
    "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}})");
  s = ParseQuantScheme(json::object(), kSource, &hf, "ckpt/hf_quant_config.json");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->kv_cache_fp8);
  const json int8 = json::parse(R"({"quantization": {"quant_algo": "FP8",
    "kv_cache_quant_algo": "INT8"}})");
  s = ParseQuantScheme(json::object(), kSource, &int8, "ckpt/hf_quant_config.json");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("kv_cache_quant_algo"));
  s = Parse(json::parse(R"({"quantization_config": {"quant_method": "modelopt",
    "quant_algo": "FP8", "kv_cache_scheme": {"dynamic": false, "num_bits": 8, "type": "float"}}})"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->kv_cache_fp8);
}

// What the writer declares reads back as the scheme it wrote.
TEST(QuantSchemeTest, TheWritersConfigsReadBack) {
  for (WeightScaling w : {WeightScaling::kTensor, WeightScaling::kChannel, WeightScaling::kBlock}) {
    auto s = Parse({{"quantization_config", Fp8QuantizationConfig(w)}});
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->weights, w);
    EXPECT_EQ(s->activations,
              w == WeightScaling::kBlock ? ActivationScaling::kGroup : ActivationScaling::kToken);
    EXPECT_FALSE(s->Quantizes("lm_head"));
  }
}

}  // namespace
}  // namespace llm::model
