#include "router/router_server.h"

#include <fcntl.h>
#include <grpcpp/create_channel_posix.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <sys/socket.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace llm::router {

RouterServer::RouterServer(RouterConfig config, DnsDiscovery::Resolve resolve)
    : config_(std::move(config)), resolve_(std::move(resolve)), metrics_(config_.policy_options) {}

RouterServer::~RouterServer() { Stop(); }

void RouterServer::SetServing(bool serving) {
  for (grpc::Server* s : {internal_.get(), health_.get()}) {
    if (s == nullptr) continue;
    auto* health = s->GetHealthCheckService();
    health->SetServingStatus(serving);
    health->SetServingStatus("llm.v1.Generation", serving);
  }
}

absl::Status RouterServer::StartPool() {
  LLM_ASSIGN_OR_RETURN(std::unique_ptr<Policy> policy,
                       MakePolicy(config_.policy, config_.policy_options));
  PoolOptions pool_options = config_.pool;
  if (!pool_options.upstream_tls.ca_file.empty()) {
    // The load watches' gRPC channels watch checked copies (verified_tls_files.h).
    LLM_ASSIGN_OR_RETURN(upstream_tls_files_, tls::VerifiedTlsFiles::Start(
                                                  pool_options.upstream_tls, "upstream_tls",
                                                  [](const tls::TlsFiles& f) {
                                                    return tls::CheckClientFiles(f, "upstream_tls");
                                                  },
                                                  "llm-router"));
    pool_options.upstream_tls = upstream_tls_files_->copies();
  }
  pool_ = std::make_unique<WorkerPool>(pool_options, std::move(policy), &metrics_);
  return absl::OkStatus();
}

absl::StatusOr<int> RouterServer::StartHealthServers() {
  // Health and reflection, on loopback only: clients reach them through the relay.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int internal_port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &internal_port);
  // The relay pings its connections to this server (proxy.keepalive_ms) while a stream such as
  // a health Watch sits idle; gRPC's default ping policy answered with GOAWAY "too many pings"
  // after a minute, ending every pass-through stream. Its only client is this process.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.RegisterService(&generation_placeholder_);
  internal_ = builder.BuildAndStart();
  if (internal_ == nullptr || internal_port == 0) {
    return absl::UnavailableError("cannot start the internal health server on loopback");
  }
  if (config_.health_listen.empty()) return internal_port;
  grpc::ServerBuilder hb;
  hb.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  hb.AddListeningPort(config_.health_listen, grpc::InsecureServerCredentials(), &health_port_);
  health_ = hb.BuildAndStart();
  if (health_ == nullptr || health_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("router.health_listen: cannot listen on ", config_.health_listen));
  }
  return internal_port;
}

void RouterServer::ResolveStaticWorkers() {
  // Static workers named by host name are resolved here, before the first call, and then on
  // their own threads; a name that does not resolve yet is tried again there (its calls fail
  // over to other workers meanwhile).
  for (const std::string& name : config_.workers) {
    if (IsNumericAddress(name)) continue;
    const auto apply = [this, name](const std::vector<std::string>& addresses) {
      worker_addresses_.Set(name, addresses);
    };
    // The refresher logs a failure (its first lookup is at once).
    if (auto first = resolve_(name); first.ok()) apply(*first);
    name_refreshers_.push_back(std::make_unique<DnsDiscovery>(name, config_.dns_refresh, apply,
                                                              resolve_, "discovery.workers"));
  }
}

absl::Status RouterServer::StartRelay(int internal_port) {
  RelayServer::Options ro;
  ro.listen = config_.listen;
  ro.threads = config_.threads;
  ro.proxy = config_.proxy;
  ro.internal_target = absl::StrCat("127.0.0.1:", internal_port);
  ro.security = security_.get();
  ro.http_listen = config_.http_listen;
  ro.http_limits = config_.http_limits;
  ro.http_ignore_unknown_fields = config_.ignore_unknown_fields;
  ro.addresses = &worker_addresses_;
  relay_ = std::make_unique<RelayServer>(pool_.get(), ro, &metrics_);
  LLM_RETURN_IF_ERROR(relay_->Start());
  port_ = relay_->port();
  metrics_.SetSources(pool_.get(), relay_.get());
  http_port_ = relay_->http_port();
  return absl::OkStatus();
}

absl::Status RouterServer::Start() {
  LLM_ASSIGN_OR_RETURN(security_, RelaySecurity::Create(config_.security));
  LLM_RETURN_IF_ERROR(StartPool());
  if (!config_.metrics_listen.empty()) {
    LLM_ASSIGN_OR_RETURN(metrics_port_, metrics_.Serve(config_.metrics_listen));
  }
  LLM_ASSIGN_OR_RETURN(const int internal_port, StartHealthServers());
  ResolveStaticWorkers();
  LLM_RETURN_IF_ERROR(StartRelay(internal_port));
  if (!config_.dns.empty()) {
    discovery_ = std::make_unique<DnsDiscovery>(
        config_.dns, config_.dns_refresh,
        [this](const std::vector<std::string>& workers) { pool_->SetWorkers(workers); }, resolve_);
  } else {
    pool_->SetWorkers(config_.workers);
  }
  reloader_ = std::make_unique<PeriodicThread>(
      "tls-reload", std::chrono::seconds(config_.security.server.reload_seconds),
      [this] { security_->Reload(); });
  SetServing(true);
  return absl::OkStatus();
}

void RouterServer::BeginDrain() {
  if (internal_) SetServing(false);
  if (relay_) relay_->StartDrain();
}

bool RouterServer::FinishDrain() {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(config_.drain_grace_seconds));
  while (relay_ && relay_->in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const bool clean = !relay_ || relay_->in_flight() == 0;
  Stop();
  return clean;
}

void RouterServer::Stop() {
  if (reloader_) reloader_->Stop();
  discovery_.reset();
  name_refreshers_.clear();
  metrics_.SetSources(nullptr, nullptr);  // the pool goes before the metrics
  if (relay_) relay_->Stop();
  if (internal_) internal_->Shutdown(std::chrono::system_clock::now());
  if (health_) health_->Shutdown(std::chrono::system_clock::now());
}

}  // namespace llm::router
