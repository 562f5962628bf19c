// llm-cli quantize: writes an FP8 checkpoint of a 16/32-bit one (a checkpoint directory or
// random:<shape>[:<seed>]): per-tensor or per-channel weights as compressed-tensors, 128x128
// blocks as Hugging Face's fine-grained fp8 (worker/model/fp8_writer.h). The tokenizer and
// generation files are copied (a random model gets its synthetic tokenizer).
#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "tools/cli/commands.h"
#include "tools/common/tool_util.h"
#include "worker/backend/synthetic_side_files.h"
#include "worker/model/config.h"
#include "worker/model/fp8_writer.h"
#include "worker/model/synthetic.h"

namespace llm::cli {

using tools::Fail;
using tools::ParseOrExit;
namespace {

namespace fs = std::filesystem;

// The files beside the weights that a checkpoint's users read (the tokenizer, the chat
// template, the generation defaults), copied where they exist.
absl::Status CopySideFiles(const std::string& from, const std::string& to) {
  for (const char* name : {"generation_config.json", "tokenizer.json", "tokenizer_config.json",
                           "special_tokens_map.json", "chat_template.jinja", "tokenizer.model"}) {
    const fs::path src = fs::path(from) / name;
    if (!fs::exists(src)) continue;
    std::error_code ec;
    const fs::path dst = fs::path(to) / name;
    fs::copy_file(src, dst, fs::copy_options::overwrite_existing, ec);
    // Writable by its owner whatever the source's mode, so a later run can replace it.
    if (!ec) fs::permissions(dst, fs::perms::owner_write, fs::perm_options::add, ec);
    if (ec) return absl::PermissionDeniedError(absl::StrCat(src.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

absl::Status Quantize(const std::string& source_spec, const std::string& out,
                      model::WeightScaling scaling, ThreadPool& pool) {
  LLM_ASSIGN_OR_RETURN(const model::ModelSource source, model::ParseModelSource(source_spec));
  LLM_ASSIGN_OR_RETURN(const model::ModelConfig config, model::LoadSourceConfig(source));
  if (config.model_type == "phi3" || config.model_type == "granite") {
    return absl::InvalidArgumentError(absl::StrCat(
        source_spec, ": ", config.model_type,
        " checkpoints are not written in FP8; serve it with engine.quantization: fp8 instead"));
  }
  std::unique_ptr<model::TensorStore> store;
  if (source.synthetic()) {
    LLM_ASSIGN_OR_RETURN(
        store, model::MakeSyntheticStore(config, source.seed, model::DType::kBF16, &pool));
  } else {
    LLM_ASSIGN_OR_RETURN(store, model::TensorStore::Open(source.dir));
  }
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(out, ": cannot create: ", ec.message()));
  LLM_RETURN_IF_ERROR(model::WriteFp8Checkpoint(config, *store, scaling, out, &pool));
  return source.synthetic() ? backend::WriteSyntheticSideFiles(config, out)
                            : CopySideFiles(source.dir, out);
}

}  // namespace

int RunQuantize(const std::vector<std::string>& args) {
  const std::string cmd = "llm-cli quantize";
  FlagSet flags;
  flags.Value("fp8", "weight scales: channel (one per output row), tensor or block (128x128)")
      .Value("model", "16/32-bit checkpoint directory or random:<shape>[:<seed>]")
      .Value("out", "output directory")
      .Value("threads", "CPU threads (0 = all cores)", "0");
  if (int rc = ParseOrExit(cmd, flags, args); rc >= 0) return rc;
  if (absl::Status st = flags.Require({"fp8", "model", "out"}); !st.ok()) return Fail(cmd, st);
  auto threads = flags.GetInt("threads");
  if (!threads.ok()) return Fail(cmd, threads.status());
  const std::string kind = flags.GetString("fp8");
  model::WeightScaling scaling;
  if (kind == "channel") {
    scaling = model::WeightScaling::kChannel;
  } else if (kind == "tensor") {
    scaling = model::WeightScaling::kTensor;
  } else if (kind == "block") {
    scaling = model::WeightScaling::kBlock;
  } else {
    return Fail(cmd, absl::InvalidArgumentError(
                         absl::StrCat("--fp8: '", kind, "' is not one of channel, tensor, block")));
  }
  ThreadPool pool(static_cast<int>(*threads));
  const std::string out = flags.GetString("out");
  if (absl::Status st = Quantize(flags.GetString("model"), out, scaling, pool); !st.ok()) {
    return Fail(cmd, st);
  }
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace llm::cli
