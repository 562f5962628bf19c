#include "common/cpu_features.h"

#include <atomic>
#include <cstdlib>

namespace llm {
namespace {

bool Detect() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return std::getenv("LLM_CPU_NO_FMA") == nullptr && __builtin_cpu_supports("avx2") &&
         __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

std::atomic<bool> force_portable{false};

}  // namespace

bool CpuHasAvx2Fma() {
  static const bool has = Detect();
  return has && !force_portable.load(std::memory_order_relaxed);
}

void ForcePortableCpuPathsForTesting(bool force) { force_portable.store(force); }

}  // namespace llm
