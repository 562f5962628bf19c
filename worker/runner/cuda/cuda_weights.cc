#include "worker/runner/cuda/cuda_weights.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "common/random_weights.h"
#include "common/status_macros.h"
#include "kernels/weights/random_init.h"
#include "worker/model/dtype.h"
#include "worker/model/llama_tensors.h"

namespace llm::runner::cuda {
namespace {

using model::TensorSpec;

constexpr size_t kAlign = 256;
constexpr size_t kStagingBytes = size_t{64} << 20;

// Where one checkpoint tensor goes in the device allocation.
struct Placement {
  const TensorSpec* spec;
  size_t offset;  // bytes
  bool f32;       // stored as fp32 (else bf16)
};

size_t NumElements(const TensorSpec& spec) {
  size_t n = 1;
  for (int64_t d : spec.shape) n *= static_cast<size_t>(d);
  return n;
}

// Lays the tensors out from `base` (null: only measures), setting w's pointers, and returns
// the bytes used. Tensors stacked into one matrix (q/k/v, gate/up) are placed back to back.
class Placer {
 public:
  Placer(const std::map<std::string, TensorSpec>& specs, std::byte* base)
      : specs_(specs), base_(base) {}

  void Align() { size_ = (size_ + kAlign - 1) / kAlign * kAlign; }
  // Places `name` at the current end; returns its address.
  std::byte* Put(const std::string& name, bool f32 = false) {
    const TensorSpec& spec = specs_.at(name);
    placements_.push_back({&spec, size_, f32});
    std::byte* p = base_ == nullptr ? nullptr : base_ + size_;
    size_ += NumElements(spec) * (f32 ? 4 : 2);
    return p;
  }
  size_t size() const { return size_; }
  const std::vector<Placement>& placements() const { return placements_; }

 private:
  const std::map<std::string, TensorSpec>& specs_;
  std::byte* base_;
  size_t size_ = 0;
  std::vector<Placement> placements_;
};

const bf16* Bf16(std::byte* p) { return reinterpret_cast<const bf16*>(p); }
const float* F32(std::byte* p) { return reinterpret_cast<const float*>(p); }

void Place(const model::ModelConfig& c, Placer& p, CudaWeights& w) {
  p.Align();
  w.embedding = Bf16(p.Put(model::kEmbedName));
  if (c.tie_word_embeddings) {
    w.head = w.embedding;
  } else {
    p.Align();
    w.head = Bf16(p.Put(model::kLmHeadName));
  }
  p.Align();
  w.final_norm = Bf16(p.Put(model::kFinalNormName));
  w.layers.assign(c.num_layers, CudaLayerWeights{});
  for (int l = 0; l < c.num_layers; ++l) {
    const model::LayerTensorNames n = model::LlamaLayerTensorNames(l);
    CudaLayerWeights& L = w.layers[l];
    p.Align();
    L.input_norm = Bf16(p.Put(n.input_norm));
    p.Align();
    L.qkv = Bf16(p.Put(n.q));
    p.Put(n.k);
    p.Put(n.v);
    if (c.qkv_bias) {
      p.Align();
      L.qkv_bias = Bf16(p.Put(n.q_bias));
      p.Put(n.k_bias);
      p.Put(n.v_bias);
    }
    p.Align();
    L.o = Bf16(p.Put(n.o));
    if (c.o_bias) {
      p.Align();
      L.o_bias = F32(p.Put(n.o_bias, /*f32=*/true));
    }
    p.Align();
    L.post_norm = Bf16(p.Put(n.post_norm));
    p.Align();
    L.gate_up = Bf16(p.Put(n.gate));
    p.Put(n.up);
    if (c.mlp_bias) {
      p.Align();
      L.gate_up_bias = Bf16(p.Put(n.gate_bias));
      p.Put(n.up_bias);
      p.Align();
      L.down_bias = F32(p.Put(n.down_bias, /*f32=*/true));
    }
    p.Align();
    L.down = Bf16(p.Put(n.down));
  }
  p.Align();
}

// Allocates the weights of `c` and returns the placements to fill.
absl::StatusOr<std::vector<Placement>> Allocate(const model::ModelConfig& c,
                                                const std::map<std::string, TensorSpec>& specs,
                                                CudaWeights& w) {
  Placer measure(specs, nullptr);
  Place(c, measure, w);
  LLM_RETURN_IF_ERROR(w.memory.Allocate(measure.size(), "model weights"));
  Placer placer(specs, w.memory.get());
  Place(c, placer, w);
  return placer.placements();
}

std::map<std::string, TensorSpec> SpecsByName(const model::ModelConfig& c) {
  std::map<std::string, TensorSpec> specs;
  for (auto& s : model::LlamaTensorSpecs(c)) specs.emplace(s.name, std::move(s));
  if (c.tie_word_embeddings) {
    // Not listed when tied; the placement code never asks for it then.
    specs.erase(model::kLmHeadName);
  }
  return specs;
}

// Converts elements [begin, begin + count) of `view` to bf16 or fp32 at `dst`.
void Convert(const model::TensorView& view, size_t begin, size_t count, bool f32, std::byte* dst) {
  const size_t src_elem = model::DTypeSize(view.dtype);
  const std::byte* src = view.data + begin * src_elem;
  if (f32) {
    model::ConvertToF32(view.dtype, src, count, reinterpret_cast<float*>(dst));
    return;
  }
  if (view.dtype == model::DType::kBF16) {
    std::memcpy(dst, src, count * 2);
    return;
  }
  // Through fp32 in pieces, so the scratch stays small.
  constexpr size_t kPiece = 4096;
  float tmp[kPiece];
  for (size_t i = 0; i < count; i += kPiece) {
    const size_t n = std::min(kPiece, count - i);
    model::ConvertToF32(view.dtype, src + i * src_elem, n, tmp);
    for (size_t j = 0; j < n; ++j) {
      const uint16_t h = model::F32ToBf16(tmp[j]);
      std::memcpy(dst + (i + j) * 2, &h, 2);
    }
  }
}

}  // namespace

absl::StatusOr<CudaWeights> UploadCudaWeights(const model::ModelConfig& config,
                                              const model::TensorStore& store,
                                              cudaStream_t stream) {
  const auto specs = SpecsByName(config);
  // Check every tensor before allocating anything.
  std::map<std::string, const model::TensorView*> views;
  LLM_ASSIGN_OR_RETURN(views[model::kEmbedName], model::FindEmbedding(store, config));
  if (!config.tie_word_embeddings) {
    LLM_ASSIGN_OR_RETURN(views[model::kLmHeadName], model::FindLmHead(store, config));
  }
  for (const auto& [name, spec] : specs) {
    if (views.count(name)) continue;
    LLM_ASSIGN_OR_RETURN(views[name], model::GetChecked(store, spec));
  }

  CudaWeights w;
  LLM_ASSIGN_OR_RETURN(std::vector<Placement> placements, Allocate(config, specs, w));
  PinnedMemory staging[2];
  Event copied[2];
  for (int i = 0; i < 2; ++i) {
    LLM_RETURN_IF_ERROR(staging[i].Allocate(kStagingBytes, "weight staging"));
    LLM_RETURN_IF_ERROR(copied[i].Create());
  }
  bool used[2] = {false, false};
  int next = 0;
  for (const Placement& p : placements) {
    const model::TensorView& view = *views.at(p.spec->name);
    const size_t elem = p.f32 ? 4 : 2;
    const size_t total = static_cast<size_t>(view.num_elements());
    const size_t per_chunk = kStagingBytes / elem;
    for (size_t begin = 0; begin < total; begin += per_chunk) {
      const size_t count = std::min(per_chunk, total - begin);
      // The buffer's previous copy must be done before it is overwritten.
      if (used[next]) {
        LLM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(copied[next].get()), "weight upload");
      }
      Convert(view, begin, count, p.f32, staging[next].get());
      LLM_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(w.memory.get() + p.offset + begin * elem, staging[next].get(),
                          count * elem, cudaMemcpyHostToDevice, stream),
          "weight upload");
      LLM_CUDA_RETURN_IF_ERROR(cudaEventRecord(copied[next].get(), stream), "weight upload");
      used[next] = true;
      next = 1 - next;
    }
  }
  LLM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "weight upload");
  return w;
}

absl::StatusOr<CudaWeights> RandomCudaWeights(const model::ModelConfig& config, uint64_t seed,
                                              cudaStream_t stream) {
  const auto specs = SpecsByName(config);
  CudaWeights w;
  LLM_ASSIGN_OR_RETURN(std::vector<Placement> placements, Allocate(config, specs, w));
  for (const Placement& p : placements) {
    const model::SyntheticFill fill = model::SyntheticFillFor(*p.spec);
    kernels::RandomInitParams params{};
    std::byte* dst = w.memory.get() + p.offset;
    params.out = p.f32 ? nullptr : reinterpret_cast<bf16*>(dst);
    params.out_f32 = p.f32 ? reinterpret_cast<float*>(dst) : nullptr;
    params.count = static_cast<int64_t>(NumElements(*p.spec));
    params.stream = model::TensorStream(seed, p.spec->name);
    params.bound = fill.bound;
    params.constant = fill.constant;
    LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchRandomInit(params, stream), "random weights");
  }
  LLM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "random weights");
  return w;
}

}  // namespace llm::runner::cuda
