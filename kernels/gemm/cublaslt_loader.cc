#include "kernels/gemm/cublaslt_loader.h"

#include <dlfcn.h>

#include <mutex>

namespace llm::kernels {

namespace {

#define LLM_STR2(x) #x
#define LLM_STR(x) LLM_STR2(x)

struct Loaded {
  CublasLtApi api{};
  bool ok = false;
  std::string error;
};

Loaded Load() {
  Loaded l;
  // The major version this was compiled against, then the unversioned name, then the
  // toolkit's own folder (for machines whose loader path lacks it).
  const char* candidates[] = {
      "libcublasLt.so." LLM_STR(CUBLAS_VER_MAJOR),
      "libcublasLt.so",
#ifdef LLM_CUDA_LIBRARY_DIR
      LLM_CUDA_LIBRARY_DIR "/libcublasLt.so." LLM_STR(CUBLAS_VER_MAJOR),
#endif
  };
  void* handle = nullptr;
  for (const char* name : candidates) {
    handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) break;
    const char* err = dlerror();
    l.error += std::string(l.error.empty() ? "" : "; ") + (err != nullptr ? err : name);
  }
  if (handle == nullptr) {
    l.error = "cannot load cuBLASLt: " + l.error;
    return l;
  }
  bool missing = false;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (fn == nullptr && !missing) {
      missing = true;
      l.error = std::string("cuBLASLt lacks ") + name;
    }
  };
  CublasLtApi& a = l.api;
  sym(a.Create, "cublasLtCreate");
  sym(a.Destroy, "cublasLtDestroy");
  sym(a.MatmulDescCreate, "cublasLtMatmulDescCreate");
  sym(a.MatmulDescDestroy, "cublasLtMatmulDescDestroy");
  sym(a.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
  sym(a.MatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
  sym(a.MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
  sym(a.MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
  sym(a.MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
  sym(a.MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
  sym(a.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
  sym(a.MatmulAlgoCheck, "cublasLtMatmulAlgoCheck");
  sym(a.MatmulAlgoConfigGetAttribute, "cublasLtMatmulAlgoConfigGetAttribute");
  sym(a.Matmul, "cublasLtMatmul");
  // NOTE: the handle is never closed: the library stays loaded for the process.
  l.ok = !missing;
  return l;
}

}  // namespace

const CublasLtApi* LoadCublasLt(std::string* error) {
  static const Loaded loaded = Load();
  if (!loaded.ok) {
    if (error != nullptr) *error = loaded.error;
    return nullptr;
  }
  return &loaded.api;
}

}  // namespace llm::kernels
