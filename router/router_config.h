// llm-router's configuration: the keys of its YAML file (each also a flag) and their checks.
#ifndef LLM_ROUTER_ROUTER_CONFIG_H_
#define LLM_ROUTER_ROUTER_CONFIG_H_

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config/config.h"
#include "router/policy/policy.h"
#include "router/pool/worker_pool.h"
#include "router/relay/relay_server.h"
#include "router/relay/security.h"

namespace llm::router {

struct RouterConfig {
  std::string listen;                  // gRPC, host:port
  std::string metrics_listen;          // HTTP /metrics; empty disables
  std::string health_listen;           // plaintext grpc.health.v1 only; empty disables
  std::string http_listen;             // the OpenAI-compatible HTTP API; empty disables
  HttpLimits http_limits;              // its slow-client timeouts and connection caps
  bool ignore_unknown_fields = false;  // router.unknown_fields: ignore
  SecurityOptions security;            // tls.*, upstream_tls.*, auth.token_file
  // Discovery: exactly one of a static list and a DNS name.
  std::vector<std::string> workers;
  std::string dns;
  std::chrono::milliseconds dns_refresh{5000};
  std::string policy = "cache_aware";
  PolicyOptions policy_options;
  PoolOptions pool;
  ProxyOptions proxy;
  int threads = 0;  // relay event loops; 0: one per core
  double drain_grace_seconds = 30;
};

config::ConfigSchema RouterConfigSchema();

// Parses `args` (flags, with an optional --config FILE). Errors name the key.
absl::StatusOr<RouterConfig> LoadRouterConfig(const std::vector<std::string>& args);

}  // namespace llm::router

#endif  // LLM_ROUTER_ROUTER_CONFIG_H_
