// Helpers for the GPU kernel tests: device buffers, bf16 conversion on the host, random inputs,
// and the skip when no device is usable.
#ifndef LLM_TESTS_KERNELS_GPU_TEST_UTIL_H_
#define LLM_TESTS_KERNELS_GPU_TEST_UTIL_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/device.h"
#include "worker/model/dtype.h"

namespace llm::kernels::testing {

// GTEST_SKIP()s the test unless a CUDA device is usable.
#define LLM_REQUIRE_GPU()                                                       \
  do {                                                                          \
    if (::llm::kernels::DeviceCount() == 0) {                                   \
      GTEST_SKIP() << "GPU test skipped: " << ::llm::kernels::NoDeviceReason(); \
    }                                                                           \
  } while (0)

#define LLM_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(expr)

// An owning device allocation of n elements of T.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (cudaMalloc(&ptr_, std::max<size_t>(1, n) * sizeof(T)) != cudaSuccess) ptr_ = nullptr;
    // Poison, so an element a kernel forgot to write shows up.
    if (ptr_) cudaMemset(ptr_, 0xCD, std::max<size_t>(1, n) * sizeof(T));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { Upload(host); }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return ptr_; }
  void Upload(const std::vector<T>& host) {
    cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  std::vector<T> Download() const {
    std::vector<T> host(n_);
    cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t n_;
};

inline __nv_bfloat16 HostToBf16(float f) {
  __nv_bfloat16_raw raw;
  raw.x = model::F32ToBf16(f);
  return __nv_bfloat16(raw);
}
inline float HostFromBf16(__nv_bfloat16 b) {
  return model::Bf16ToF32(static_cast<__nv_bfloat16_raw>(b).x);
}
// Rounds x to bf16 and back (the values a bf16 kernel actually sees).
inline float RoundBf16(float x) { return HostFromBf16(HostToBf16(x)); }

inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = RoundBf16(d(rng));  // representable in bf16
  return v;
}

inline std::vector<__nv_bfloat16> ToBf16Vector(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = HostToBf16(v[i]);
  return out;
}

inline std::vector<float> FromBf16Vector(const std::vector<__nv_bfloat16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = HostFromBf16(v[i]);
  return out;
}

// ||a - b|| / ||b||; NaN in a fails (returns infinity).
inline double RelativeError(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i])) return INFINITY;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// x . w^T (+ bias, where not null) in double, x [rows, in], w [out, in]: the reference of the
// matrix products.
inline std::vector<double> DoubleProduct(const std::vector<float>& x, const std::vector<float>& w,
                                         const float* bias, int rows, int in, int out) {
  std::vector<double> want(size_t(rows) * out);
  for (int r = 0; r < rows; ++r) {
    for (int o = 0; o < out; ++o) {
      double acc = bias != nullptr ? bias[o] : 0.0;
      for (int i = 0; i < in; ++i) acc += double(x[size_t(r) * in + i]) * w[size_t(o) * in + i];
      want[size_t(r) * out + o] = acc;
    }
  }
  return want;
}

}  // namespace llm::kernels::testing

#endif  // LLM_TESTS_KERNELS_GPU_TEST_UTIL_H_
