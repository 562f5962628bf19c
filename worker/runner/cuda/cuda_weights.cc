#include "worker/runner/cuda/cuda_weights.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/random_weights.h"
#include "common/status_macros.h"
#include "kernels/elementwise/rmsnorm.h"
#include "kernels/weights/quantize_weights.h"
#include "kernels/weights/random_init.h"
#include "worker/model/dtype.h"
#include "worker/model/fp8_quant.h"
#include "worker/model/linear_weights.h"
#include "worker/model/llama_tensors.h"
#include "worker/model/load_progress.h"

namespace llm::runner::cuda {
namespace {

using model::TensorSpec;

constexpr size_t kAlign = 256;
constexpr size_t kStagingBytes = size_t{64} << 20;

// A tensor converted into the allocation (bf16, or fp32 for the biases added to the residual).
struct TensorPlacement {
  const TensorSpec* spec;
  size_t offset;  // bytes
  bool f32;
};

// An FP8 product: its stacked modules' weights as E4M3 rows, their scales in the device layout
// (kernels/gemm/weight.h), and a static input scale.
struct Fp8Placement {
  std::vector<const TensorSpec*> shards;
  kernels::WeightScales scales;
  size_t e4m3_offset, scale_offset, input_scale_offset;  // input_scale_offset 0: none
  int64_t out = 0;
  int32_t in = 0;
};

size_t NumElements(const TensorSpec& spec) {
  size_t n = 1;
  for (int64_t d : spec.shape) n *= static_cast<size_t>(d);
  return n;
}

// Lays the weights out from `base` (null: only measures), setting w's pointers, and records what
// fills each region. Tensors stacked into one matrix (q/k/v, gate/up) are placed back to back.
class Placer {
 public:
  Placer(const std::map<std::string, TensorSpec>& specs, std::byte* base, bool fp8,
         kernels::WeightScales scales, bool static_inputs)
      : specs_(specs), base_(base), fp8_(fp8), scales_(scales), static_(static_inputs) {}

  void Align() { size_ = (size_ + kAlign - 1) / kAlign * kAlign; }
  // Places tensor `name` at the current end; returns its address.
  std::byte* Put(const std::string& name, bool f32 = false) {
    const TensorSpec& spec = specs_.at(name);
    tensors_.push_back({&spec, size_, f32});
    std::byte* p = At(size_);
    size_ += NumElements(spec) * (f32 ? 4 : 2);
    return p;
  }
  // A product of the stacked modules `names` with `biases` (fp32 when `f32_bias`: o, down).
  CudaProduct Product(std::initializer_list<std::string> names,
                      std::initializer_list<std::string> biases, bool f32_bias) {
    CudaProduct out;
    if (!fp8_) {
      Align();
      out.w = kernels::Weight(reinterpret_cast<const bf16*>(At(size_)));
      for (const std::string& n : names) Put(n);
    } else {
      out.w = PutFp8(names, out.input_scale);
    }
    if (biases.size() > 0) {
      Align();
      out.bias = At(size_);
      for (const std::string& n : biases) Put(n, f32_bias);
      if (fp8_ && f32_bias) {
        Align();
        out.bias_bf16 = reinterpret_cast<const bf16*>(At(size_));
        for (const std::string& n : biases) Put(n);
      }
    }
    return out;
  }
  size_t size() const { return size_; }
  const std::vector<TensorPlacement>& tensors() const { return tensors_; }
  const std::vector<Fp8Placement>& fp8() const { return fp8_products_; }

 private:
  std::byte* At(size_t offset) const { return base_ == nullptr ? nullptr : base_ + offset; }

  kernels::Weight PutFp8(std::initializer_list<std::string> names, const float*& input_scale) {
    Fp8Placement p;
    for (const std::string& n : names) {
      p.shards.push_back(&specs_.at(n));
      p.out += p.shards.back()->shape[0];
      p.in = static_cast<int32_t>(p.shards.back()->shape[1]);
    }
    p.scales = scales_;
    Align();
    p.e4m3_offset = size_;
    size_ += static_cast<size_t>(p.out) * p.in;
    Align();
    p.scale_offset = size_;
    size_ +=
        4 * static_cast<size_t>(scales_ == kernels::WeightScales::kBlock
                                    ? kernels::BlockScaleCount(static_cast<int32_t>(p.out), p.in)
                                    : p.out);
    p.input_scale_offset = 0;
    if (static_) {
      Align();
      p.input_scale_offset = size_;
      size_ += 4;
      input_scale = reinterpret_cast<const float*>(At(p.input_scale_offset));
    }
    fp8_products_.push_back(p);
    return kernels::Weight::Fp8(reinterpret_cast<const uint8_t*>(At(p.e4m3_offset)), p.scales,
                                reinterpret_cast<const float*>(At(p.scale_offset)));
  }

  const std::map<std::string, TensorSpec>& specs_;
  std::byte* base_;
  bool fp8_;
  kernels::WeightScales scales_;
  bool static_;
  size_t size_ = 0;
  std::vector<TensorPlacement> tensors_;
  std::vector<Fp8Placement> fp8_products_;
};

const bf16* Bf16(std::byte* p) { return reinterpret_cast<const bf16*>(p); }

void Place(const model::ModelConfig& c, Placer& p, CudaWeights& w) {
  using Names = std::initializer_list<std::string>;
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
    L.qkv = p.Product({n.q, n.k, n.v}, c.qkv_bias ? Names{n.q_bias, n.k_bias, n.v_bias} : Names{},
                      false);
    if (c.qk_norm) {
      p.Align();
      L.q_norm = Bf16(p.Put(n.q_norm));
      p.Align();
      L.k_norm = Bf16(p.Put(n.k_norm));
    }
    L.o = p.Product({n.o}, c.o_bias ? Names{n.o_bias} : Names{}, true);
    p.Align();
    L.post_norm = Bf16(p.Put(n.post_norm));
    L.gate_up =
        p.Product({n.gate, n.up}, c.mlp_bias ? Names{n.gate_bias, n.up_bias} : Names{}, false);
    L.down = p.Product({n.down}, c.mlp_bias ? Names{n.down_bias} : Names{}, true);
  }
  p.Align();
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

kernels::WeightScales DeviceScales(const model::QuantScheme& q) {
  return q.weights == model::WeightScaling::kBlock ? kernels::WeightScales::kBlock
                                                   : kernels::WeightScales::kRow;
}

// Allocates the weights of `c` and returns the placements to fill.
absl::StatusOr<Placer> Allocate(const model::ModelConfig& c,
                                const std::map<std::string, TensorSpec>& specs,
                                const model::QuantScheme& quant, CudaWeights& w) {
  const bool fp8 = quant.quantized();
  const bool static_inputs = quant.activations == model::ActivationScaling::kStatic;
  Placer measure(specs, nullptr, fp8, DeviceScales(quant), static_inputs);
  Place(c, measure, w);
  LLM_RETURN_IF_ERROR(w.memory.Allocate(measure.size(), "model weights"));
  Placer placer(specs, w.memory.get(), fp8, DeviceScales(quant), static_inputs);
  Place(c, placer, w);
  w.fp8 = fp8;
  w.input_scales = quant.activations == model::ActivationScaling::kGroup
                       ? kernels::ActivationScales::kGroup
                       : kernels::ActivationScales::kRow;
  return placer;
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

// Host-to-device copies through two pinned buffers, each reused once its copy is done; each
// chunk counted in `progress` when given.
class Uploader {
 public:
  explicit Uploader(model::LoadProgress* progress = nullptr) : progress_(progress) {}
  absl::Status Init() {
    for (int i = 0; i < 2; ++i) {
      LLM_RETURN_IF_ERROR(staging_[i].Allocate(kStagingBytes, "weight staging"));
      LLM_RETURN_IF_ERROR(copied_[i].Create());
    }
    return absl::OkStatus();
  }
  // Copies `bytes` bytes to `dst`, `fill(offset, count, staging)` writing each chunk's.
  template <typename Fill>
  absl::Status Copy(std::byte* dst, size_t bytes, size_t elem, const Fill& fill,
                    cudaStream_t stream) {
    const size_t per_chunk = kStagingBytes / elem * elem;
    for (size_t begin = 0; begin < bytes; begin += per_chunk) {
      const size_t count = std::min(per_chunk, bytes - begin);
      if (used_[next_]) {
        LLM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(copied_[next_].get()), "weight upload");
      }
      fill(begin / elem, count / elem, staging_[next_].get());
      LLM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst + begin, staging_[next_].get(), count,
                                               cudaMemcpyHostToDevice, stream),
                               "weight upload");
      LLM_CUDA_RETURN_IF_ERROR(cudaEventRecord(copied_[next_].get(), stream), "weight upload");
      used_[next_] = true;
      next_ = 1 - next_;
      if (progress_ != nullptr) progress_->Add(count, 0);
    }
    return absl::OkStatus();
  }

 private:
  model::LoadProgress* progress_;
  PinnedMemory staging_[2];
  Event copied_[2];
  bool used_[2] = {false, false};
  int next_ = 0;
};

// Uploads an FP8 checkpoint's product: its modules' E4M3 bytes back to back, the scales, the
// static input scale.
absl::Status UploadFp8Product(const model::TensorStore& store, const model::QuantScheme& quant,
                              const Fp8Placement& p, std::byte* base, Uploader& up,
                              cudaStream_t stream) {
  std::vector<model::LinearWeight> shards;
  for (const TensorSpec* spec : p.shards) {
    LLM_ASSIGN_OR_RETURN(model::LinearWeight w, model::GetLinearWeight(store, quant, *spec));
    shards.push_back(std::move(w));
  }
  size_t row_offset = 0;
  float input_scale = 0.0f;
  for (const auto& s : shards) {
    const auto* src = s.weight->data;
    LLM_RETURN_IF_ERROR(up.Copy(
        base + p.e4m3_offset + row_offset * p.in, static_cast<size_t>(s.out) * p.in, 1,
        [&](size_t begin, size_t count, std::byte* dst) { std::memcpy(dst, src + begin, count); },
        stream));
    row_offset += static_cast<size_t>(s.out);
    input_scale = std::max(input_scale, s.input_scale);
  }
  const std::vector<float> scales = DeviceScaleArray(shards, p.scales, p.out, p.in);
  LLM_RETURN_IF_ERROR(up.Copy(
      base + p.scale_offset, scales.size() * 4, 4,
      [&](size_t begin, size_t count, std::byte* dst) {
        std::memcpy(dst, scales.data() + begin, count * 4);
      },
      stream));
  if (p.input_scale_offset == 0) return absl::OkStatus();
  return up.Copy(
      base + p.input_scale_offset, 4, 4,
      [&](size_t, size_t, std::byte* dst) { std::memcpy(dst, &input_scale, 4); }, stream);
}

// Quantises, per row, the bf16 rows at `bf16_rows` into product `p`'s E4M3 rows from
// `row_offset` and their scales.
absl::Status QuantizeRows(const bf16* bf16_rows, int64_t rows, const Fp8Placement& p,
                          size_t row_offset, std::byte* base, cudaStream_t stream) {
  kernels::QuantizeWeightRowsParams q{};
  q.w = bf16_rows;
  q.out = rows;
  q.in = p.in;
  q.e4m3 = reinterpret_cast<uint8_t*>(base + p.e4m3_offset) + row_offset * p.in;
  q.scale = reinterpret_cast<float*>(base + p.scale_offset) + row_offset;
  LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchQuantizeWeightRows(q, stream), "weight quantisation");
  return absl::OkStatus();
}

// The largest stacked module of any FP8 product: the bf16 scratch of quantisation at load.
size_t LargestShard(const std::vector<Fp8Placement>& products) {
  size_t n = 0;
  for (const auto& p : products) {
    for (const TensorSpec* s : p.shards) n = std::max(n, NumElements(*s));
  }
  return n;
}

}  // namespace

absl::Status CheckCudaQuantization(const model::ModelConfig& c, const model::QuantScheme& quant) {
  if (!quant.quantized()) return absl::OkStatus();
  // The FP8 kernels' shapes: every product's input a multiple of 16 (the GEMV's 16-byte E4M3
  // vectors, cuBLASLt's FP8 rule), its output rows a multiple of 8, and the hidden size one
  // RMSNorm's one-block-per-row kernel takes (it writes the E4M3 rows).
  const std::pair<const char*, int32_t> inputs[] = {{"hidden_size", c.hidden_size},
                                                    {"q_dim", c.q_dim()},
                                                    {"intermediate_size", c.intermediate_size}};
  for (const auto& [name, n] : inputs) {
    if (n % 16 != 0) {
      return absl::UnimplementedError(absl::StrCat(
          "CUDA runner: FP8 products need inputs of a multiple of 16; ", name, " is ", n));
    }
  }
  if (c.hidden_size > kernels::kFp8MaxNormDim || (c.q_dim() + 2 * c.kv_dim()) % 8 != 0) {
    return absl::UnimplementedError(
        absl::StrCat("CUDA runner: FP8 products need hidden_size at most ", kernels::kFp8MaxNormDim,
                     " and q/k/v rows a multiple of 8 (hidden_size ", c.hidden_size, ")"));
  }
  if (quant.weights != model::WeightScaling::kBlock) return absl::OkStatus();
  // The stacked modules but the last must hold whole 128-row blocks.
  const std::pair<const char*, int32_t> firsts[] = {
      {"q_proj", c.q_dim()}, {"k_proj", c.kv_dim()}, {"gate_proj", c.intermediate_size}};
  for (const auto& [name, rows] : firsts) {
    if (rows % model::kFp8Block != 0) {
      return absl::UnimplementedError(absl::StrCat(
          "CUDA runner: ", quant.source, ": 128x128 block scales with ", name, "'s ", rows,
          " rows (not a multiple of 128) cannot be stacked into one product for cuBLASLt's "
          "block scales; the CPU backend serves it"));
    }
  }
  return absl::OkStatus();
}

std::vector<float> DeviceScaleArray(const std::vector<model::LinearWeight>& shards,
                                    kernels::WeightScales scales, int64_t out, int32_t in) {
  std::vector<float> a;
  if (scales == kernels::WeightScales::kRow) {
    for (const auto& s : shards) {
      for (int64_t r = 0; r < s.out; ++r) {
        a.push_back(s.scaling == model::WeightScaling::kTensor ? s.scales[0]
                                                               : s.scales[static_cast<size_t>(r)]);
      }
    }
    return a;
  }
  const int32_t stride = kernels::BlockScaleStride(in), blocks = kernels::Fp8Blocks(in);
  a.assign(static_cast<size_t>(kernels::BlockScaleCount(static_cast<int32_t>(out), in)), 0.0f);
  int64_t block_row = 0;
  for (const auto& s : shards) {
    for (int64_t br = 0; br < model::CeilDiv(s.out, model::kFp8Block); ++br, ++block_row) {
      for (int32_t b = 0; b < blocks; ++b) {
        a[static_cast<size_t>(block_row * stride + b)] =
            s.scales[static_cast<size_t>(br * blocks + b)];
      }
    }
  }
  return a;
}

absl::StatusOr<CudaWeights> UploadCudaWeights(const model::ModelConfig& config,
                                              const model::TensorStore& store,
                                              const model::QuantScheme& quant,
                                              cudaStream_t stream) {
  LLM_RETURN_IF_ERROR(CheckCudaQuantization(config, quant));
  const auto specs = SpecsByName(config);
  CudaWeights w;
  LLM_ASSIGN_OR_RETURN(Placer placer, Allocate(config, specs, quant, w));
  // Check every 16/32-bit tensor before copying anything (the FP8 products are checked as they
  // are read).
  std::map<std::string, const model::TensorView*> views;
  LLM_ASSIGN_OR_RETURN(views[model::kEmbedName], model::FindEmbedding(store, config));
  if (!config.tie_word_embeddings) {
    LLM_ASSIGN_OR_RETURN(const model::LinearWeight head,
                         model::GetLinearWeight(store, quant, specs.at(model::kLmHeadName)));
    if (head.scaling != model::WeightScaling::kNone) {
      return absl::UnimplementedError(absl::StrCat("CUDA runner: ", quant.source,
                                                   ": an FP8 output head is not served (its "
                                                   "ignore list should name lm_head)"));
    }
    views[model::kLmHeadName] = head.weight;
  }
  for (const TensorPlacement& p : placer.tensors()) {
    if (views.count(p.spec->name)) continue;
    LLM_ASSIGN_OR_RETURN(views[p.spec->name], model::GetChecked(store, *p.spec));
  }
  // engine.quantization: fp8 reads the products' 16-bit modules and quantises them here.
  const bool at_load = quant.format == model::QuantScheme::Format::kOnline;
  if (at_load) {
    for (const Fp8Placement& p : placer.fp8()) {
      for (const TensorSpec* s : p.shards) {
        LLM_ASSIGN_OR_RETURN(views[s->name], model::GetChecked(store, *s));
      }
    }
  }
  model::LoadProgress progress(store.dir(), "uploaded", placer.size(), 0);
  Uploader up(&progress);
  LLM_RETURN_IF_ERROR(up.Init());
  std::byte* base = w.memory.get();
  for (const TensorPlacement& p : placer.tensors()) {
    const model::TensorView& view = *views.at(p.spec->name);
    LLM_RETURN_IF_ERROR(up.Copy(
        base + p.offset, static_cast<size_t>(view.num_elements()) * (p.f32 ? 4 : 2), p.f32 ? 4 : 2,
        [&](size_t begin, size_t count, std::byte* dst) {
          Convert(view, begin, count, p.f32, dst);
        },
        stream));
  }
  DeviceMemory scratch;
  if (at_load && !placer.fp8().empty()) {
    LLM_RETURN_IF_ERROR(scratch.Allocate(LargestShard(placer.fp8()) * 2, "quantisation scratch"));
  }
  for (const Fp8Placement& p : placer.fp8()) {
    if (!at_load) {
      LLM_RETURN_IF_ERROR(UploadFp8Product(store, quant, p, base, up, stream));
      continue;
    }
    size_t row_offset = 0;
    for (const TensorSpec* s : p.shards) {
      const model::TensorView& view = *views.at(s->name);
      LLM_RETURN_IF_ERROR(up.Copy(
          scratch.get(), NumElements(*s) * 2, 2,
          [&](size_t begin, size_t count, std::byte* dst) {
            Convert(view, begin, count, false, dst);
          },
          stream));
      LLM_RETURN_IF_ERROR(QuantizeRows(reinterpret_cast<const bf16*>(scratch.get()), s->shape[0], p,
                                       row_offset, base, stream));
      row_offset += static_cast<size_t>(s->shape[0]);
    }
  }
  LLM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "weight upload");
  return w;
}

absl::StatusOr<CudaWeights> RandomCudaWeights(const model::ModelConfig& config, uint64_t seed,
                                              const model::QuantScheme& quant,
                                              cudaStream_t stream) {
  if (quant.quantized() && quant.format != model::QuantScheme::Format::kOnline) {
    return absl::InvalidArgumentError("random weights are quantised at load or not at all");
  }
  const auto specs = SpecsByName(config);
  CudaWeights w;
  LLM_ASSIGN_OR_RETURN(Placer placer, Allocate(config, specs, quant, w));
  const auto fill = [&](const TensorSpec& spec, std::byte* dst, bool f32) -> absl::Status {
    const model::SyntheticFill values = model::SyntheticFillFor(spec);
    kernels::RandomInitParams params{};
    params.out = f32 ? nullptr : reinterpret_cast<bf16*>(dst);
    params.out_f32 = f32 ? reinterpret_cast<float*>(dst) : nullptr;
    params.count = static_cast<int64_t>(NumElements(spec));
    params.stream = model::TensorStream(seed, spec.name);
    params.bound = values.bound;
    params.constant = values.constant;
    LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchRandomInit(params, stream), "random weights");
    return absl::OkStatus();
  };
  for (const TensorPlacement& p : placer.tensors()) {
    LLM_RETURN_IF_ERROR(fill(*p.spec, w.memory.get() + p.offset, p.f32));
  }
  DeviceMemory scratch;
  if (!placer.fp8().empty()) {
    LLM_RETURN_IF_ERROR(scratch.Allocate(LargestShard(placer.fp8()) * 2, "quantisation scratch"));
  }
  for (const Fp8Placement& p : placer.fp8()) {
    size_t row_offset = 0;
    for (const TensorSpec* s : p.shards) {
      LLM_RETURN_IF_ERROR(fill(*s, scratch.get(), false));
      LLM_RETURN_IF_ERROR(QuantizeRows(reinterpret_cast<const bf16*>(scratch.get()), s->shape[0], p,
                                       row_offset, w.memory.get(), stream));
      row_offset += static_cast<size_t>(s->shape[0]);
    }
  }
  LLM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "random weights");
  return w;
}

}  // namespace llm::runner::cuda
