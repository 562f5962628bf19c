#include "router/router_config.h"

#include <unistd.h>

#include <tuple>

#include "absl/strings/str_cat.h"
#include "router/pool/discovery.h"

namespace llm::router {
namespace {

// router.*: the addresses and the HTTP front's bounds.
void AddListenKeys(config::ConfigSchema& s) {
  s.String("router.listen", "0.0.0.0:50050", "gRPC address (host:port; port 0 picks one)")
      .String("router.metrics_listen", "0.0.0.0:9091",
              "HTTP address of /metrics (host:port; empty disables)")
      .String("router.http_listen", ":8000",
              "HTTP address of the OpenAI-compatible API (/v1/chat/completions, /v1/completions, "
              "/v1/responses, /v1/models, /tokenize, /detokenize, /health); host:port or :port; "
              "empty disables")
      .String("router.unknown_fields", "reject",
              "HTTP API: a body field no OpenAI reference has: reject (a 400 naming it) or "
              "ignore (logged once per field name)")
      .Double("router.http_read_timeout_seconds", 30, 0, 86400,
              "HTTP API: a request's headers and body must arrive within this from its first "
              "byte (a new connection's from its accept), else the connection is closed "
              "(slowloris); 0: no limit")
      .Double("router.http_idle_timeout_seconds", 60, 0, 86400,
              "HTTP API: a keep-alive connection idle this long between requests is closed; 0: "
              "never")
      .Int("router.http_max_connections", 4096, 0, 1 << 24,
           "HTTP API: open connections at once; past it a new one gets 503 with Retry-After and "
           "is closed; 0: no cap")
      .Int("router.http_max_connections_per_client", 0, 0, 1 << 24,
           "HTTP API: open connections from one client address; past it a new one gets 503; 0: "
           "no cap (behind an ingress every client shares its address)")
      .String("router.health_listen", "",
              "plaintext gRPC address serving only grpc.health.v1 (for Kubernetes probes when "
              "router.listen needs TLS); empty disables")
      .String("router.id", "", "name sent to workers with each load watch (default: hostname)");
}

// discovery.*, policy.*, load.* and failures.*: which workers, and how one is chosen.
void AddRoutingKeys(config::ConfigSchema& s) {
  s.String("discovery.workers", "",
           "static worker list: host:port,host:port (or use discovery.dns)")
      .String("discovery.dns", "",
              "host:port re-resolved periodically, one worker per address (a Kubernetes "
              "headless Service)")
      .Int("discovery.dns_refresh_ms", 5000, 100, 3600000,
           "how often discovery.dns, and the host names in discovery.workers, are resolved")
      .String("policy.name", "cache_aware",
              "p2c (power of two choices on estimated wait), least_in_flight, or cache_aware "
              "(the worker that was sent the longest part of the prompt's prefix, unless its wait "
              "exceeds p2c's pick by more than the prefill the hit saves)")
      .Double("policy.balance_factor", 2, 1, 1e6,
              "cache_aware: the worker with the longest prefix match is passed over when its "
              "requests exceed this times the least loaded worker's plus policy.balance_margin")
      .Double("policy.balance_margin", 4, 0, 1e9,
              "cache_aware: see policy.balance_factor (requests)")
      .Double("policy.saturation_queue_per_slot", 4, 0, 1e6,
              "a worker with no free slot and this many waiting requests per slot is skipped")
      .Double("policy.decode_steps_per_request", 256, 1, 1e9,
              "estimated steps a request holds its slot (wait estimate)")
      .Double("policy.prefill_tokens_per_step", 512, 1, 1e9,
              "prompt tokens a worker prefills per step, until it reports its measured cost of a "
              "prompt token (wait and cache-hit estimates)")
      .Int("load.interval_ms", 10, 1, 1000, "lower bound between two load reports from a worker")
      .Int("load.stale_ms", 3000, 10, 600000,
           "a worker whose last load report is older counts as unknown load, not idle")
      .Int("failures.max_attempts", 3, 1, 16,
           "workers tried per request (retries only before the first message)")
      .Int("failures.eject_after", 3, 1, 1000,
           "consecutive failed requests that put a worker in back-off")
      .Int("failures.eject_base_ms", 1000, 1, 3600000, "first back-off; doubles per ejection")
      .Int("failures.eject_max_ms", 30000, 1, 3600000, "longest back-off");
}

// proxy.*: the relay's bounds and connections to the workers.
void AddProxyKeys(config::ConfigSchema& s) {
  s.Int("proxy.max_in_flight", 10000, 1, 1 << 24, "calls in progress; more get RESOURCE_EXHAUSTED")
      .Int("proxy.max_message_bytes", 4 << 20, 1024, 1 << 30, "largest request accepted (bytes)")
      .Int("proxy.threads", 0, 0, 1024, "relay event loops; 0: one per core")
      .Int("proxy.upstream_connections", 4, 1, 64,
           "HTTP/2 connections per worker per event loop; a client connection's calls share one")
      .Int("proxy.connect_timeout_ms", 2000, 1, 600000,
           "a worker connection not established by then is closed and its calls retried")
      .Int("proxy.keepalive_ms", 15000, 10000, 3600000,
           "a worker connection with calls open and silent this long is pinged (the workers "
           "accept a ping every 10 s)")
      .Int("proxy.keepalive_timeout_ms", 5000, 1, 600000,
           "an unanswered ping closes the worker connection, ending its calls");
}

// tls.*, upstream_tls.*, auth.*, and the drain's grace.
void AddSecurityKeys(config::ConfigSchema& s) {
  s.String("tls.cert_file", "",
           "PEM certificate (chain) of router.listen; with tls.key_file turns TLS on")
      .String("tls.key_file", "", "PEM private key of tls.cert_file")
      .String("tls.client_ca_file", "",
              "PEM CA bundle: clients must present a certificate signed by it (mutual TLS)")
      .Int("tls.reload_seconds", 10, 1, 86400,
           "how often TLS and token files are checked; changes apply to new connections "
           "(tokens: to new calls)")
      .String("upstream_tls.ca_file", "",
              "PEM CA bundle the workers' certificates must chain to; turns TLS to the "
              "workers on")
      .String("upstream_tls.cert_file", "",
              "PEM certificate the router presents to the workers (mutual TLS)")
      .String("upstream_tls.key_file", "", "PEM private key of upstream_tls.cert_file")
      .String("upstream_tls.server_name", "",
              "name checked in the workers' certificates (and sent as SNI) instead of their "
              "address (discovery finds them by IP)")
      .String("auth.token_file", "",
              "file holding a bearer token that llm.v1 calls must carry (authorization: Bearer "
              "TOKEN); empty: no token check")
      .Double("router.drain_grace_seconds", 30, 0, 86400,
              "on SIGTERM, how long calls in progress may take to finish before exit");
}

}  // namespace

config::ConfigSchema RouterConfigSchema() {
  config::ConfigSchema s;
  AddListenKeys(s);
  AddRoutingKeys(s);
  AddProxyKeys(s);
  AddSecurityKeys(s);
  return s;
}

namespace {

// router.*: the addresses (checked) and the HTTP front's handling and bounds.
absl::Status LoadListenKeys(const config::ConfigValues& v, RouterConfig& c) {
  c.listen = v.String("router.listen");
  c.metrics_listen = v.String("router.metrics_listen");
  c.health_listen = v.String("router.health_listen");
  c.http_listen = v.String("router.http_listen");
  const std::string unknown_fields = v.String("router.unknown_fields");
  if (unknown_fields != "reject" && unknown_fields != "ignore") {
    return absl::InvalidArgumentError(
        absl::StrCat("router.unknown_fields: '", unknown_fields, "' is neither reject nor ignore"));
  }
  c.ignore_unknown_fields = unknown_fields == "ignore";
  c.http_limits.read_timeout_seconds = v.Double("router.http_read_timeout_seconds");
  c.http_limits.idle_timeout_seconds = v.Double("router.http_idle_timeout_seconds");
  c.http_limits.max_connections = static_cast<int>(v.Int("router.http_max_connections"));
  c.http_limits.max_connections_per_client =
      static_cast<int>(v.Int("router.http_max_connections_per_client"));
  for (const auto& [key, value, may_be_empty] :
       {std::tuple<const char*, const std::string&, bool>{"router.listen", c.listen, false},
        {"router.metrics_listen", c.metrics_listen, true},
        {"router.http_listen", c.http_listen, true},
        {"router.health_listen", c.health_listen, true}}) {
    if (absl::Status st = config::CheckHostPort(key, value, may_be_empty, 0); !st.ok()) return st;
  }
  return absl::OkStatus();
}

// tls.*, upstream_tls.* and auth.*: the files named, each checked (and the token read) now.
absl::Status LoadSecurityKeys(const config::ConfigValues& v, SecurityOptions& sec) {
  sec.server.cert_file = v.String("tls.cert_file");
  sec.server.key_file = v.String("tls.key_file");
  sec.server.ca_file = v.String("tls.client_ca_file");
  sec.upstream.ca_file = v.String("upstream_tls.ca_file");
  sec.upstream.cert_file = v.String("upstream_tls.cert_file");
  sec.upstream.key_file = v.String("upstream_tls.key_file");
  sec.upstream.server_name = v.String("upstream_tls.server_name");
  sec.server.reload_seconds = sec.upstream.reload_seconds =
      static_cast<int>(v.Int("tls.reload_seconds"));
  sec.token_file = v.String("auth.token_file");
  if (absl::Status st = tls::CheckServerFiles(sec.server, "tls"); !st.ok()) return st;
  if (absl::Status st = tls::CheckClientFiles(sec.upstream, "upstream_tls"); !st.ok()) return st;
  if (sec.token_file.empty()) return absl::OkStatus();
  std::string token;
  return tls::ReadFile(sec.token_file, "auth.token_file", &token);
}

// discovery.*: exactly one of a static list and a DNS name (with a port).
absl::Status LoadDiscoveryKeys(const config::ConfigValues& v, RouterConfig& c) {
  const std::string workers = v.String("discovery.workers");
  c.dns = v.String("discovery.dns");
  if (workers.empty() == c.dns.empty()) {
    return absl::InvalidArgumentError(
        "discovery.workers, discovery.dns: give exactly one (a static list or a DNS name)");
  }
  // A name without a port was accepted, then resolved to nothing forever while /health said ok.
  if (absl::Status st = config::CheckHostPort("discovery.dns", c.dns, true, 1); !st.ok()) return st;
  if (!workers.empty()) {
    auto list = ParseWorkerList(workers);
    if (!list.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("discovery.workers: ", list.status().message()));
    }
    c.workers = *std::move(list);
  }
  c.dns_refresh = std::chrono::milliseconds(v.Int("discovery.dns_refresh_ms"));
  return absl::OkStatus();
}

// policy.*, load.*, failures.* and proxy.*: the choice of a worker, the pool's view of the
// workers, and the relay.
absl::Status LoadRoutingKeys(const config::ConfigValues& v, RouterConfig& c) {
  c.policy = v.String("policy.name");
  if (c.policy != "p2c" && c.policy != "least_in_flight" && c.policy != "cache_aware") {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy.name: '", c.policy, "' is not one of p2c, least_in_flight, cache_aware"));
  }
  c.policy_options.saturation_queue_per_slot = v.Double("policy.saturation_queue_per_slot");
  c.policy_options.balance_factor = v.Double("policy.balance_factor");
  c.policy_options.balance_margin = v.Double("policy.balance_margin");
  c.policy_options.decode_steps_per_request = v.Double("policy.decode_steps_per_request");
  c.policy_options.prefill_tokens_per_step = v.Double("policy.prefill_tokens_per_step");
  std::string id = v.String("router.id");
  if (id.empty()) {
    char host[256] = {0};
    id = gethostname(host, sizeof(host) - 1) == 0 ? host : "llm-router";
  }
  c.pool.router_id = id;
  c.pool.load_interval_ms = static_cast<int>(v.Int("load.interval_ms"));
  c.pool.upstream_tls = c.security.upstream;
  c.pool.stale_after = std::chrono::milliseconds(v.Int("load.stale_ms"));
  c.pool.eject_after_failures = static_cast<int>(v.Int("failures.eject_after"));
  c.pool.eject_base = std::chrono::milliseconds(v.Int("failures.eject_base_ms"));
  c.pool.eject_max = std::chrono::milliseconds(v.Int("failures.eject_max_ms"));
  if (c.pool.eject_max < c.pool.eject_base) {
    return absl::InvalidArgumentError(
        "failures.eject_max_ms: must be at least failures.eject_base_ms");
  }
  c.proxy.max_attempts = static_cast<int>(v.Int("failures.max_attempts"));
  c.proxy.max_in_flight = v.Int("proxy.max_in_flight");
  c.proxy.max_message_bytes = v.Int("proxy.max_message_bytes");
  c.threads = static_cast<int>(v.Int("proxy.threads"));
  c.proxy.upstream_connections = static_cast<int>(v.Int("proxy.upstream_connections"));
  c.proxy.connect_timeout = std::chrono::milliseconds(v.Int("proxy.connect_timeout_ms"));
  c.proxy.keepalive = std::chrono::milliseconds(v.Int("proxy.keepalive_ms"));
  c.proxy.keepalive_timeout = std::chrono::milliseconds(v.Int("proxy.keepalive_timeout_ms"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RouterConfig> LoadRouterConfig(const std::vector<std::string>& args) {
  auto v = RouterConfigSchema().Load(args);
  if (!v.ok()) return v.status();
  RouterConfig c;
  if (absl::Status st = LoadListenKeys(*v, c); !st.ok()) return st;
  if (absl::Status st = LoadSecurityKeys(*v, c.security); !st.ok()) return st;
  if (absl::Status st = LoadDiscoveryKeys(*v, c); !st.ok()) return st;
  if (absl::Status st = LoadRoutingKeys(*v, c); !st.ok()) return st;
  c.drain_grace_seconds = v->Double("router.drain_grace_seconds");
  return c;
}

}  // namespace llm::router
