// llm-cli convert: a GGUF file as a Hugging Face checkpoint directory, for users moving from
// llama.cpp or Ollama: config.json and generation_config.json from the metadata, model.safetensors
// with the tensors dequantised (bf16, or f32) under Hugging Face's names and layouts
// (worker/model/gguf_model.h), and tokenizer.json / tokenizer_config.json (with the chat
// template) from the tokenizer metadata (worker/frontend/gguf_tokenizer.h).
#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/mapped_file.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "tools/cli/commands.h"
#include "tools/common/tool_util.h"
#include "worker/frontend/gguf_tokenizer.h"
#include "worker/model/config.h"
#include "worker/model/gguf_model.h"
#include "worker/model/safetensors.h"

namespace llm::cli {

using tools::Fail;
using tools::ParseOrExit;
namespace {

absl::Status WriteWeights(const model::TensorStore& store, const std::string& path) {
  std::vector<model::SafetensorsWriter::Entry> entries;
  for (const std::string& name : store.Names()) {
    const model::TensorView* v = store.Find(name);
    entries.push_back({v->name, v->dtype, v->shape});
  }
  LLM_ASSIGN_OR_RETURN(auto writer, model::SafetensorsWriter::Create(path, entries));
  for (const auto& e : entries) {
    const model::TensorView* v = store.Find(e.name);
    LLM_RETURN_IF_ERROR(
        writer->Append(std::string_view(reinterpret_cast<const char*>(v->data), v->num_bytes)));
  }
  return writer->Close();
}

absl::Status Convert(const std::string& gguf, const std::string& out, model::DType dtype,
                     ThreadPool& pool) {
  LLM_ASSIGN_OR_RETURN(auto file, model::GgufFile::Open(gguf));
  LLM_ASSIGN_OR_RETURN(const model::ModelConfig config, model::GgufModelConfig(*file));
  LLM_ASSIGN_OR_RETURN(const frontend::HfTokenizerFiles tokenizer,
                       frontend::TokenizerFilesFromGgufFile(*file));
  LLM_ASSIGN_OR_RETURN(auto store, model::LoadGgufTensors(*file, config, {dtype, &pool, true}));
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(out, ": cannot create: ", ec.message()));
  nlohmann::json hf_config = model::ModelConfigToJson(config);
  hf_config["torch_dtype"] = dtype == model::DType::kF32 ? "float32" : "bfloat16";
  LLM_RETURN_IF_ERROR(WriteStringToFile(out + "/config.json", hf_config.dump(2)));
  LLM_RETURN_IF_ERROR(WriteStringToFile(out + "/generation_config.json",
                                        model::GenerationConfigToJson(config).dump(2)));
  LLM_RETURN_IF_ERROR(WriteStringToFile(out + "/tokenizer.json", tokenizer.tokenizer.dump()));
  LLM_RETURN_IF_ERROR(
      WriteStringToFile(out + "/tokenizer_config.json", tokenizer.tokenizer_config.dump(2)));
  return WriteWeights(*store, out + "/model.safetensors");
}

}  // namespace

int RunConvert(const std::vector<std::string>& args) {
  const std::string cmd = "llm-cli convert";
  FlagSet flags;
  flags.Value("gguf", "a GGUF file (llama, qwen2, qwen3, phi3 or granite)")
      .Value("out", "output directory (a Hugging Face checkpoint)")
      .Value("dtype", "the weights' dtype: bf16 or f32", "bf16")
      .Value("threads", "CPU threads (0 = all cores)", "0");
  if (int rc = ParseOrExit(cmd, flags, args); rc >= 0) return rc;
  if (absl::Status st = flags.Require({"gguf", "out"}); !st.ok()) return Fail(cmd, st);
  auto threads = flags.GetInt("threads");
  if (!threads.ok()) return Fail(cmd, threads.status());
  const std::string dtype = flags.GetString("dtype");
  if (dtype != "bf16" && dtype != "f32") {
    return Fail(cmd, absl::InvalidArgumentError(
                         absl::StrCat("--dtype: '", dtype, "' is not one of bf16, f32")));
  }
  ThreadPool pool(static_cast<int>(*threads));
  const std::string out = flags.GetString("out");
  if (absl::Status st = Convert(flags.GetString("gguf"), out,
                                dtype == "f32" ? model::DType::kF32 : model::DType::kBF16, pool);
      !st.ok()) {
    return Fail(cmd, st);
  }
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace llm::cli
