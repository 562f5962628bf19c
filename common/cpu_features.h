// What the host CPU can run, decided once per process.
#ifndef LLM_COMMON_CPU_FEATURES_H_
#define LLM_COMMON_CPU_FEATURES_H_

namespace llm {

// True when the CPU has AVX2 and FMA (x86) and the environment does not set LLM_CPU_NO_FMA.
// Every vectorised CPU path is chosen by this one answer, and each gives the same bits as its
// portable twin except the matrix product, whose portable twin rounds the multiply and the add
// separately (cpu_ops.h).
bool CpuHasAvx2Fma();

// Tests: while forced, CpuHasAvx2Fma() answers false, so one process can compare each vector
// path with its portable twin. (The matrix product's choice is fixed at start and ignores it.)
void ForcePortableCpuPathsForTesting(bool force);

}  // namespace llm

#endif  // LLM_COMMON_CPU_FEATURES_H_
