# llm-worker image. Build from the repository root (the context must be the whole checkout):
#
#   docker build -f deploy/docker/worker.Dockerfile -t llm-worker:0.1.0 .
#   docker build -f deploy/docker/worker.Dockerfile --build-arg WITH_CUDA=0 \
#     -t llm-worker:0.1.0-cpu .
#
# Why Debian and not an nvidia/cuda base: the binaries link Debian 12's gRPC, protobuf, abseil,
# yaml-cpp and prometheus-cpp, which the Ubuntu-based CUDA images do not carry in the same
# versions. So both stages are Debian 12. The GPU driver (libcuda, libnvidia-ml) is not in the
# image: the NVIDIA container toolkit mounts the node's driver into the container at run time
# (NVIDIA_VISIBLE_DEVICES is set by the device plugin, NVIDIA_DRIVER_CAPABILITIES below). The
# CUDA runtime is linked statically; cuBLASLt, which the worker loads at run time, comes from
# NVIDIA's CUDA repository for Debian 12, as do nvcc and the headers in the build stage.
# docs/operations.md, "Images", has the details.

# CUDA release of NVIDIA's Debian 12 repository, as in its package names (13-0 is CUDA 13.0,
# which needs driver 580 or later on the nodes). WITH_CUDA=0 builds a CPU-only image.
ARG CUDA_VERSION=13-0
ARG WITH_CUDA=1
# NVIDIA's CUDA repository for Debian 12 (x86_64); its keyring package sets up apt for it.
ARG CUDA_REPO=https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64

FROM debian:12 AS build
ARG CUDA_VERSION
ARG WITH_CUDA
ARG CUDA_REPO
WORKDIR /src
# NVIDIA's CUDA repository for Debian 12: nvcc, the CUDA runtime (static) and cuBLAS headers.
RUN set -eux; \
    if [ "$WITH_CUDA" = 1 ]; then \
      apt-get update; \
      apt-get install -y --no-install-recommends ca-certificates curl; \
      curl -fsSLo /tmp/cuda-keyring.deb "$CUDA_REPO/cuda-keyring_1.1-1_all.deb"; \
      dpkg -i /tmp/cuda-keyring.deb; \
      apt-get update; \
      apt-get install -y --no-install-recommends \
        cuda-nvcc-${CUDA_VERSION} cuda-cudart-dev-${CUDA_VERSION} libcublas-dev-${CUDA_VERSION}; \
      rm -rf /var/lib/apt/lists/*; \
    fi
# Build dependencies first (a layer that changes only with scripts/setup.sh), then the sources.
COPY scripts/setup.sh scripts/setup.sh
RUN scripts/setup.sh --build && rm -rf /var/lib/apt/lists/*
COPY . .
# A build/ folder from the host (had .dockerignore not applied) would carry another CMake cache.
RUN set -eux; \
    rm -rf build; \
    cuda_flags="-DLLM_ENABLE_CUDA=OFF"; \
    if [ "$WITH_CUDA" = 1 ]; then \
      nvcc="$(ls -d /usr/local/cuda-*/bin/nvcc | head -n1)"; \
      cuda_flags="-DLLM_ENABLE_CUDA=ON -DCMAKE_CUDA_COMPILER=$nvcc"; \
    fi; \
    scripts/build.sh --no-tests $cuda_flags; \
    strip --strip-unneeded build/bin/llm-worker; \
    deploy/docker/runtime-packages.sh build/bin/llm-worker >/src/runtime-packages.txt

FROM debian:12-slim
ARG CUDA_VERSION
ARG WITH_CUDA
ARG CUDA_REPO
COPY --from=build /src/runtime-packages.txt /tmp/runtime-packages.txt
# The Debian libraries the binary links, then (CUDA) cuBLASLt, which lives in the CUDA
# release's own folder: an ld.so.conf entry makes the loader search it.
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends ca-certificates $(cat /tmp/runtime-packages.txt); \
    if [ "$WITH_CUDA" = 1 ]; then \
      apt-get install -y --no-install-recommends curl; \
      curl -fsSLo /tmp/cuda-keyring.deb "$CUDA_REPO/cuda-keyring_1.1-1_all.deb"; \
      dpkg -i /tmp/cuda-keyring.deb; \
      apt-get update; \
      apt-get install -y --no-install-recommends libcublas-${CUDA_VERSION}; \
      apt-get purge -y curl; \
      apt-get autoremove -y; \
      rm -f /tmp/cuda-keyring.deb; \
      ls -d /usr/local/cuda-*/targets/x86_64-linux/lib >/etc/ld.so.conf.d/llm-cuda.conf; \
      ldconfig; \
    fi; \
    rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt
# The NVIDIA container toolkit mounts the driver's compute (libcuda) and utility (NVML)
# libraries into the container; the nvidia/cuda images set the same.
ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility
COPY --from=build /src/build/bin/llm-worker /usr/local/bin/llm-worker
# A numeric non-root user, so Kubernetes can check runAsNonRoot (deploy/k8s uses 10001 too).
RUN groupadd --system --gid 10001 llm && useradd --system --uid 10001 --gid llm --no-create-home llm
USER 10001:10001
# gRPC, /metrics, plaintext health (server.listen, server.metrics_listen, server.health_listen).
EXPOSE 50051 9090 50052
# Arguments are flags: Kubernetes passes --config /etc/llm/worker.yaml (deploy/k8s); by hand,
#   docker run llm-worker:0.1.0-cpu --model random:tiny --engine.backend cpu
ENTRYPOINT ["/usr/local/bin/llm-worker"]
