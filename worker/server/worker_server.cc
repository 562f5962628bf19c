#include "worker/server/worker_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tls/grpc_tls.h"
#include "worker/frontend/chat/chat_template.h"
#include "worker/model/config.h"
#include "worker/model/gguf_model.h"
#include "worker/tools/reasoning_parser.h"
#include "worker/tools/tool_format.h"

namespace llm::server {

namespace {

std::string HostName() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "worker";
  return buf;
}

// The start lines of the model: slots and KV blocks, its RoPE when not plain (scaled, partial),
// the linear layers' format when quantised,
// the KV cache's when FP8 or when the checkpoint declares one we do not follow.
void LogBackend(const std::string& model, const backend::Backend& b,
                const runner::RunnerInfo& info) {
  std::fprintf(stderr, "llm-worker: %s on %s (%s backend): %d slots, %d KV blocks (%.1f MiB)\n",
               model.c_str(), info.device.c_str(), b.backend.c_str(), info.sizes.max_slots,
               info.sizes.kv_blocks, static_cast<double>(info.kv_cache_bytes) / (1 << 20));
  if (const std::string rope = model::DescribeRope(b.config); !rope.empty()) {
    std::fprintf(stderr, "llm-worker: RoPE: %s\n", rope.c_str());
  }
  if (b.quant.quantized()) {
    std::fprintf(stderr, "llm-worker: linear layers: %s\n", b.quant.Describe().c_str());
  }
  if (b.kv.fp8() || b.kv.source.find("declares") != std::string::npos) {
    std::fprintf(stderr, "llm-worker: KV cache: %s%s%s\n", b.kv.Describe().c_str(),
                 b.kv.fp8() ? "" : ": ", b.kv.fp8() ? "" : b.kv.source.c_str());
  }
}

// The start lines of the scheduler: the prompt budgets as settled, and the KV block policy.
void LogScheduler(const engine::SchedulerConfig& sc) {
  const int32_t decoding = sc.PrefillBudget(1), alone = sc.PrefillBudget(0);
  const bool capped = decoding < sc.max_prefill_tokens ||
                      alone < std::max(sc.max_prefill_tokens, sc.max_prefill_tokens_alone);
  std::fprintf(stderr,
               "llm-worker: prompt tokens per step: up to %d while requests decode, %d with "
               "none%s\n",
               decoding, alone, capped ? " (capped by engine.max_batch_tokens)" : "");
  std::fprintf(stderr, "llm-worker: KV blocks: %s\n", sc.DescribeKvPolicy().c_str());
}

}  // namespace

WorkerServer::WorkerServer(WorkerConfig config)
    : config_(std::move(config)),
      metrics_(config_.model_name),
      generation_(&metrics_, static_cast<size_t>(config_.max_message_bytes)) {}

WorkerServer::~WorkerServer() {
  if (watchdog_) watchdog_->Stop();
  if (load_) load_->Stop();
  if (server_) server_->Shutdown(std::chrono::system_clock::now());
  if (health_server_) health_server_->Shutdown(std::chrono::system_clock::now());
  worker_.reset();
}

void WorkerServer::SetHealth(const std::string& service, bool serving) {
  for (grpc::Server* s : {server_.get(), health_server_.get()}) {
    if (s != nullptr) s->GetHealthCheckService()->SetServingStatus(service, serving);
  }
}

void WorkerServer::SetServing(bool serving) {
  for (const char* service : {"", "llm.v1.Generation", "llm.v1.WorkerLoad"}) {
    SetHealth(service, serving);
  }
}

void WorkerServer::WatchdogTick() {
  const auto limit = std::chrono::duration_cast<loop::Clock::duration>(
      std::chrono::duration<double>(config_.watchdog_seconds));
  const loop::Clock::duration age = worker_->EngineIterationAge(loop::Clock::now());
  const bool live = age < limit;
  if (live == live_) return;
  live_ = live;
  SetHealth("liveness", live);
  std::fprintf(
      stderr, "llm-worker: engine watchdog: %s\n",
      live ? "the engine is stepping again; live"
           : absl::StrCat("one engine iteration has run for ",
                          std::chrono::duration_cast<std::chrono::seconds>(age).count(),
                          " s (engine.watchdog_seconds ", config_.watchdog_seconds, "); not live")
                 .c_str());
}

absl::Status WorkerServer::OpenPorts() {
  if (!config_.metrics_listen.empty()) {
    LLM_ASSIGN_OR_RETURN(metrics_port_, metrics_.Serve(config_.metrics_listen));
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // NOTE: gRPC turns SO_REUSEPORT on by default, which lets a second process bind the same port
  // and silently take half the connections. A port in use must be an error instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Routers find a vanished worker by keepalive pings (every 20 s): accept them.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  tls::TlsFiles server_tls = config_.tls;
  if (!server_tls.cert_file.empty()) {
    // gRPC watches checked copies, never the operator's files (verified_tls_files.h).
    LLM_ASSIGN_OR_RETURN(
        tls_files_,
        tls::VerifiedTlsFiles::Start(
            server_tls, "tls",
            [](const tls::TlsFiles& f) { return tls::CheckServerFiles(f, "tls"); }, "llm-worker"));
    server_tls = tls_files_->copies();
  }
  builder.AddListeningPort(config_.listen, tls::ServerCredentials(server_tls), &port_);
  // The transport takes messages up to 4x the configured limit, so that a request over the
  // limit gets INVALID_ARGUMENT from the service (wire_check.h) rather than a bare transport
  // error; beyond that gRPC refuses it with RESOURCE_EXHAUSTED.
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<int64_t>(int64_t{config_.max_message_bytes} * 4, INT32_MAX)));
  builder.RegisterService(&generation_);
  load_ = std::make_unique<LoadService>(config_.load_interval_ms);
  builder.RegisterService(load_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    return absl::UnavailableError(absl::StrCat("server.listen: cannot listen on ", config_.listen,
                                               " (in use, or not an address of this host)"));
  }
  if (config_.health_listen.empty()) return absl::OkStatus();
  grpc::ServerBuilder hb;
  hb.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  hb.AddListeningPort(config_.health_listen, grpc::InsecureServerCredentials(), &health_port_);
  health_server_ = hb.BuildAndStart();
  if (health_server_ == nullptr || health_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("server.health_listen: cannot listen on ", config_.health_listen));
  }
  return absl::OkStatus();
}

absl::StatusOr<runner::RunnerInfo> WorkerServer::LoadModel() {
  LLM_ASSIGN_OR_RETURN(backend::Backend b, backend::CreateBackend(config_.backend));
  pool_ = std::move(b.pool);
  const runner::RunnerInfo info = b.runner->info();
  LogBackend(config_.model_name, b, info);
  device_monitor_ = std::make_unique<DeviceMonitor>(info.pci_bus_id);
  if (!info.pci_bus_id.empty() && !device_monitor_->unavailable_reason().empty()) {
    std::fprintf(stderr, "llm-worker: GPU counters unavailable: %s\n",
                 device_monitor_->unavailable_reason().c_str());
  }
  LLM_ASSIGN_OR_RETURN(
      worker_, loop::Worker::Create(config_.worker, std::move(b.runner), std::move(b.tokenizer),
                                    b.config.eos_token_ids, &metrics_, &metrics_));
  LogScheduler(worker_->scheduler_config());
  return info;
}

void WorkerServer::StartServing(const runner::RunnerInfo& info) {
  LoadFacts facts;
  facts.worker_id =
      config_.worker_id.empty() ? absl::StrCat(HostName(), ":", port_) : config_.worker_id;
  facts.model = config_.model_name;
  facts.served_names = config_.served_names;
  facts.device = info.device;
  facts.monitor = device_monitor_.get();
  facts.memory_reserved_bytes = info.weight_bytes + info.kv_cache_bytes;
  facts.memory_total_bytes = info.memory_total_bytes;
  load_->Start(worker_.get(), facts);
  metrics_.SetDeviceMonitor(device_monitor_.get());
  metrics_.SetWorker(worker_.get());
  generation_.SetWorker(worker_.get());
  watchdog_ = std::make_unique<PeriodicThread>("watchdog", std::chrono::seconds(1),
                                               [this] { WatchdogTick(); });
  SetServing(true);
}

absl::Status WorkerServer::Start() {
  LLM_RETURN_IF_ERROR(OpenPorts());
  SetServing(false);  // until the model is loaded
  SetHealth("liveness", true);
  LLM_ASSIGN_OR_RETURN(const runner::RunnerInfo info, LoadModel());
  LLM_RETURN_IF_ERROR(SetUpChat());
  StartServing(info);
  return absl::OkStatus();
}

bool WorkerServer::Drain() {
  const auto grace = std::chrono::duration_cast<loop::Clock::duration>(
      std::chrono::duration<double>(config_.drain_grace_seconds));
  if (server_) SetServing(false);
  bool finished = true;
  if (worker_) {
    worker_->BeginDrain();
    finished = worker_->WaitIdle(loop::Clock::now() + grace);
  }
  if (watchdog_) watchdog_->Stop();
  if (load_) load_->Stop();
  // Streams still open after the grace period are cancelled.
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  if (health_server_) health_server_->Shutdown(std::chrono::system_clock::now());
  generation_.SetWorker(nullptr);
  metrics_.SetWorker(nullptr);
  worker_.reset();
  return finished;
}

absl::Status WorkerServer::SetUpChat() {
  // The template's directory: the tokenizer's (a file's folder), else the model's; a GGUF
  // file's own metadata (tokenizer.chat_template) where the tokenizer or the model is one.
  std::string dir = config_.backend.tokenizer;
  if (!dir.empty() && std::filesystem::is_regular_file(dir) && !model::IsGgufPath(dir)) {
    dir = std::filesystem::path(dir).parent_path().string();
  }
  if (dir.empty() && (std::filesystem::is_directory(config_.backend.model) ||
                      model::IsGgufPath(config_.backend.model))) {
    dir = config_.backend.model;
  }
  auto chat = frontend::ChatTemplate::Load(dir, config_.chat_template);
  if (absl::IsNotFound(chat.status()) && config_.chat_template.empty()) {
    worker_->SetChatRenderer(nullptr, std::string(chat.status().message()));
    return absl::OkStatus();
  }
  if (!chat.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.chat_template: ", chat.status().message()));
  }
  std::fprintf(stderr, "llm-worker: chat template from %s\n", chat->source().c_str());
  const frontend::Tokenizer& tokenizer = worker_->tokenizer();
  const auto text_of = [&](std::optional<int32_t> id) -> std::optional<std::string> {
    if (!id) return std::nullopt;
    auto text = tokenizer.Decode(std::span<const int32_t>(&*id, 1), /*skip_special_tokens=*/false);
    return text.ok() ? std::optional<std::string>(*text) : std::nullopt;
  };
  chat->DefaultSpecialTokens(text_of(tokenizer.bos_id()), text_of(tokenizer.eos_id()));
  LLM_ASSIGN_OR_RETURN(const tools::ToolFormat format,
                       tools::ResolveToolFormat(config_.tool_call_parser, chat->text()));
  worker_->SetToolFormat(format);
  LLM_ASSIGN_OR_RETURN(const tools::ReasoningFormat reasoning,
                       tools::ResolveReasoningFormat(config_.reasoning_parser, chat->text()));
  worker_->SetReasoningFormat(reasoning);
  std::fprintf(stderr, "llm-worker: reasoning: %s%s\n",
               tools::ReasoningFormatName(reasoning).data(),
               config_.reasoning_parser == "auto" ? " (from the chat template)" : "");
  std::fprintf(stderr, "llm-worker: tool calls: %s%s%s\n", tools::ToolFormatName(format).data(),
               config_.tool_call_parser == "auto" ? " (from the chat template)" : "",
               format == tools::ToolFormat::kNone
                   ? "; tool_choice auto refused, required and named calls written as json"
                   : "");
  auto shared = std::make_shared<const frontend::ChatTemplate>(*std::move(chat));
  worker_->SetChatRenderer([shared](const loop::ChatPrompt& c) {
    if (c.continue_final_message) return shared->ApplyContinuing(c.messages, c.tools, c.kwargs);
    return shared->Apply(c.messages, c.tools, c.add_generation_prompt, c.kwargs);
  });
  return absl::OkStatus();
}

}  // namespace llm::server
