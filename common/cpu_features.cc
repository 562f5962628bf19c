#include "common/cpu_features.h"

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

}  // namespace

bool CpuHasAvx2Fma() {
  static const bool has = Detect();
  return has;
}

}  // namespace llm
