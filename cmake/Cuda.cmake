# LLM_ENABLE_CUDA: on by default when nvcc is found. When on, kernels/ is compiled by nvcc for
# sm_80 (A100) and sm_90 (H100/H200); when off, kernels/ and everything that needs it are left
# out of the build. LLM_CUDA_SUMMARY says which and why (printed by the top-level file).
include(CheckLanguage)
if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  set(_llm_cuda_default ON)
else()
  set(_llm_cuda_default OFF)
endif()
option(LLM_ENABLE_CUDA "Build the CUDA kernels and runner" ${_llm_cuda_default})

if(LLM_ENABLE_CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR "LLM_ENABLE_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  endif()
  enable_language(CUDA)
  # CMake 3.25 does not know nvcc's C++20 flag; kernels are written in C++17.
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  string(REPLACE ";" ", " _llm_archs "${CMAKE_CUDA_ARCHITECTURES}")
  set(LLM_CUDA_SUMMARY "ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION} at ${CMAKE_CUDA_COMPILER}; \
architectures ${_llm_archs}): kernels/, the CUDA runner and the GPU tests are built")
elseif(CMAKE_CUDA_COMPILER)
  set(LLM_CUDA_SUMMARY "OFF (LLM_ENABLE_CUDA=OFF, although nvcc is at ${CMAKE_CUDA_COMPILER}): \
CPU backend only")
else()
  set(LLM_CUDA_SUMMARY "OFF (no nvcc on PATH or in /usr/local/cuda/bin): CPU backend only; \
kernels/, the CUDA runner and the GPU tests are not built")
endif()
