#include "worker/model/synthetic.h"

#include <charconv>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/random_weights.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "worker/model/gguf_model.h"
#include "worker/model/shapes.h"

namespace llm::model {

namespace {
constexpr char kRandomPrefix[] = "random:";
}  // namespace

bool ModelSource::gguf() const { return !synthetic() && IsGgufPath(dir); }

std::string ModelSource::name() const {
  if (synthetic()) return absl::StrCat(kRandomPrefix, shape);
  std::filesystem::path p(dir);
  if (!p.has_filename()) p = p.parent_path();  // "models/x/" names x
  return gguf() ? p.stem().string() : p.filename().string();
}

absl::StatusOr<ModelSource> ParseModelSource(const std::string& spec) {
  ModelSource source;
  if (spec.rfind(kRandomPrefix, 0) != 0) {
    if (spec.empty()) return absl::InvalidArgumentError("model: no model given");
    source.dir = spec;
    return source;
  }
  std::string rest = spec.substr(sizeof(kRandomPrefix) - 1);
  const size_t colon = rest.find(':');
  if (colon != std::string::npos) {
    const std::string seed = rest.substr(colon + 1);
    const auto [end, ec] = std::from_chars(seed.data(), seed.data() + seed.size(), source.seed);
    if (ec != std::errc() || end != seed.data() + seed.size() || seed.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", spec, "': the seed '", seed, "' is not a non-negative integer"));
    }
    rest.resize(colon);
  }
  if (absl::Status st = ShapeConfig(rest).status(); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("model '", spec, "': ", st.message()));
  }
  source.shape = rest;
  return source;
}

absl::StatusOr<ModelConfig> LoadSourceConfig(const ModelSource& source) {
  if (source.synthetic()) return ShapeConfig(source.shape);
  if (source.gguf()) {
    LLM_ASSIGN_OR_RETURN(auto file, GgufFile::Open(source.dir));
    return GgufModelConfig(*file);
  }
  return LoadModelConfig(source.dir);
}

void FillSynthetic(const TensorSpec& spec, uint64_t seed, uint64_t begin, uint64_t count,
                   DType dtype, std::byte* out, ThreadPool* pool) {
  const SyntheticFill fill = SyntheticFillFor(spec);
  const uint64_t stream = TensorStream(seed, spec.name);
  const size_t elem = DTypeSize(dtype);
  auto fill_range = [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      const float v = SyntheticValue(stream, begin + i, fill.bound, fill.constant);
      std::byte* dst = out + i * elem;
      if (dtype == DType::kF32) {
        std::memcpy(dst, &v, 4);
      } else {
        const uint16_t h = dtype == DType::kBF16 ? F32ToBf16(v) : F32ToF16(v);
        std::memcpy(dst, &h, 2);
      }
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(count, 1 << 16, fill_range);
  } else {
    fill_range(0, count);
  }
}

absl::StatusOr<std::unique_ptr<TensorStore>> MakeSyntheticStore(const ModelConfig& config,
                                                                uint64_t seed, DType dtype,
                                                                ThreadPool* pool) {
  if (!IsWeightDType(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic weights: ", std::string(DTypeName(dtype)), " cannot hold weights"));
  }
  std::vector<TensorData> tensors;
  for (const TensorSpec& spec : LlamaTensorSpecs(config)) {
    uint64_t n = 1;
    for (int64_t d : spec.shape) n *= static_cast<uint64_t>(d);
    TensorData t{spec.name, dtype, spec.shape, std::string(n * DTypeSize(dtype), '\0')};
    FillSynthetic(spec, seed, 0, n, dtype, reinterpret_cast<std::byte*>(t.bytes.data()), pool);
    tensors.push_back(std::move(t));
  }
  return TensorStore::FromTensors(absl::StrCat("synthetic weights (seed ", seed, ")"),
                                  std::move(tensors));
}

}  // namespace llm::model
