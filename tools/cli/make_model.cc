// llm-cli make-model: writes a random-weight checkpoint of a named shape in Hugging Face format
// (config.json, generation_config.json, model.safetensors, tokenizer.json,
// tokenizer_config.json), for demos and benchmarks on any machine.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/mapped_file.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "tools/cli/commands.h"
#include "tools/common/tool_util.h"
#include "worker/backend/synthetic_side_files.h"
#include "worker/model/config.h"
#include "worker/model/dtype.h"
#include "worker/model/llama_tensors.h"
#include "worker/model/safetensors.h"
#include "worker/model/shapes.h"
#include "worker/model/synthetic.h"

namespace llm::cli {

using tools::Fail;
using tools::ParseOrExit;
namespace {

namespace fs = std::filesystem;
using model::DType;
using model::TensorSpec;

// Writes every tensor of the shape, generated in parallel chunks of `kChunk` elements.
absl::Status WriteWeights(const model::ModelConfig& config, const std::string& path, uint64_t seed,
                          DType dtype, ThreadPool& pool) {
  const std::vector<TensorSpec> specs = model::LlamaTensorSpecs(config);
  std::vector<model::SafetensorsWriter::Entry> entries;
  for (const auto& s : specs) entries.push_back({s.name, dtype, s.shape});
  LLM_ASSIGN_OR_RETURN(auto writer, model::SafetensorsWriter::Create(path, std::move(entries)));
  constexpr uint64_t kChunk = 1 << 24;
  const size_t elem = model::DTypeSize(dtype);
  std::string buffer;
  for (const auto& spec : specs) {
    uint64_t n = 1;
    for (int64_t d : spec.shape) n *= static_cast<uint64_t>(d);
    for (uint64_t begin = 0; begin < n; begin += kChunk) {
      const uint64_t count = std::min(kChunk, n - begin);
      buffer.resize(count * elem);
      model::FillSynthetic(spec, seed, begin, count, dtype,
                           reinterpret_cast<std::byte*>(buffer.data()), &pool);
      LLM_RETURN_IF_ERROR(writer->Append(buffer));
    }
  }
  return writer->Close();
}

absl::Status MakeModel(const std::string& shape, const std::string& out, uint64_t seed, DType dtype,
                       ThreadPool& pool) {
  LLM_ASSIGN_OR_RETURN(model::ModelConfig config, model::ShapeConfig(shape));
  config.torch_dtype = dtype == DType::kF32   ? "float32"
                       : dtype == DType::kF16 ? "float16"
                                              : "bfloat16";
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(out, ": cannot create: ", ec.message()));
  auto path = [&](const char* name) { return (fs::path(out) / name).string(); };

  LLM_RETURN_IF_ERROR(
      WriteStringToFile(path("config.json"), model::ModelConfigToJson(config).dump(2)));
  LLM_RETURN_IF_ERROR(backend::WriteSyntheticSideFiles(config, out));
  LLM_RETURN_IF_ERROR(WriteWeights(config, path("model.safetensors"), seed, dtype, pool));
  return WriteStringToFile(
      path("README.md"),
      absl::StrCat("# Random-weight ", shape, " checkpoint\n\nMade by `llm-cli make-model --shape ",
                   shape, " --seed ", seed,
                   "`. The weights are random (uniform, std 1/sqrt(fan_in)),",
                   " so the text it writes is meaningless; it is for demos and benchmarks.\n"));
}

}  // namespace

int RunMakeModel(const std::vector<std::string>& args) {
  const std::string cmd = "llm-cli make-model";
  FlagSet flags;
  flags.Value("shape", "model shape: " + absl::StrJoin(model::ShapeNames(), ", "))
      .Value("out", "output directory")
      .Value("seed", "weight seed", "0")
      .Value("dtype", "bf16, f16 or f32", "bf16")
      .Value("threads", "CPU threads (0 = all cores)", "0");
  if (int rc = ParseOrExit(cmd, flags, args); rc >= 0) return rc;
  if (absl::Status st = flags.Require({"shape", "out"}); !st.ok()) return Fail(cmd, st);
  auto seed = flags.GetInt("seed");
  if (!seed.ok()) return Fail(cmd, seed.status());
  auto threads = flags.GetInt("threads");
  if (!threads.ok()) return Fail(cmd, threads.status());
  const std::string dtype_name = flags.GetString("dtype");
  DType dtype;
  if (dtype_name == "bf16") {
    dtype = DType::kBF16;
  } else if (dtype_name == "f16") {
    dtype = DType::kF16;
  } else if (dtype_name == "f32") {
    dtype = DType::kF32;
  } else {
    return Fail(cmd, absl::InvalidArgumentError("--dtype: '" + dtype_name +
                                                "' is not one of bf16, f16, f32"));
  }
  ThreadPool pool(static_cast<int>(*threads));
  const std::string out = flags.GetString("out");
  if (absl::Status st =
          MakeModel(flags.GetString("shape"), out, static_cast<uint64_t>(*seed), dtype, pool);
      !st.ok()) {
    return Fail(cmd, st);
  }
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace llm::cli
