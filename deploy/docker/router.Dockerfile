# llm-router image. Build from the repository root (the context must be the whole checkout):
#
#   docker build -f deploy/docker/router.Dockerfile -t llm-router:0.1.0 .
#
# The router never touches a GPU, so it is built without CUDA and runs on plain Debian 12 with
# the Debian libraries it links (docs/operations.md, "Images").

FROM debian:12 AS build
WORKDIR /src
# Build dependencies first (a layer that changes only with scripts/setup.sh), then the sources.
COPY scripts/setup.sh scripts/setup.sh
RUN scripts/setup.sh --build && rm -rf /var/lib/apt/lists/*
COPY . .
# A build/ folder from the host (had .dockerignore not applied) would carry another CMake cache.
RUN set -eux; \
    rm -rf build; \
    scripts/build.sh --no-tests -DLLM_ENABLE_CUDA=OFF; \
    strip --strip-unneeded build/bin/llm-router; \
    deploy/docker/runtime-packages.sh build/bin/llm-router >/src/runtime-packages.txt

FROM debian:12-slim
COPY --from=build /src/runtime-packages.txt /tmp/runtime-packages.txt
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends ca-certificates $(cat /tmp/runtime-packages.txt); \
    rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt
COPY --from=build /src/build/bin/llm-router /usr/local/bin/llm-router
# A numeric non-root user, so Kubernetes can check runAsNonRoot (deploy/k8s uses 10001 too).
RUN groupadd --system --gid 10001 llm && useradd --system --uid 10001 --gid llm --no-create-home llm
USER 10001:10001
# gRPC, /metrics, plaintext health (router.listen, router.metrics_listen, router.health_listen).
EXPOSE 50050 8000 9091 50052
# Arguments are flags: Kubernetes passes --config /etc/llm/router.yaml (deploy/k8s); by hand,
#   docker run llm-router:0.1.0 --discovery.workers 10.0.0.5:50051
ENTRYPOINT ["/usr/local/bin/llm-router"]
