// llm-worker's configuration: the keys of its YAML file (each also a flag) and their checks.
#ifndef LLM_WORKER_SERVER_WORKER_CONFIG_H_
#define LLM_WORKER_SERVER_WORKER_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config/config.h"
#include "common/tls/tls_files.h"
#include "worker/backend/backend.h"
#include "worker/loop/worker.h"

namespace llm::server {

struct WorkerConfig {
  backend::BackendOptions backend;  // model, tokenizer and engine.* of the runner
  std::string model_name;
  std::vector<std::string> served_names;  // aliases of model_name (model.served_names)
  // A chat template file overriding the model's (tokenizer_config.json / chat_template.jinja).
  std::string chat_template;
  // The tool-call format of chat requests with tools: auto (from the template), llama3_json,
  // hermes, mistral, granite, json or none (worker/tools/tool_format.h).
  std::string tool_call_parser = "auto";
  // Where chat answers' reasoning is read from: auto (from the template), think or none
  // (worker/tools/reasoning_parser.h).
  std::string reasoning_parser = "auto";
  std::string listen;            // gRPC, host:port
  std::string metrics_listen;    // HTTP /metrics, host:port; empty disables
  std::string health_listen;     // plaintext grpc.health.v1 only, host:port; empty disables
  double watchdog_seconds = 60;  // engine iteration age that fails liveness
  tls::TlsFiles tls;             // of `listen`; plaintext when tls.cert_file is empty
  std::string worker_id;
  double drain_grace_seconds = 30;
  int load_interval_ms = 10;
  int max_message_bytes = 4 << 20;
  loop::WorkerOptions worker;  // slots and blocks come from the runner
};

// The schema: every key, its default, range and help.
config::ConfigSchema WorkerConfigSchema();

// Parses `args` (flags, with an optional --config FILE). Errors name the key.
absl::StatusOr<WorkerConfig> LoadWorkerConfig(const std::vector<std::string>& args);

}  // namespace llm::server

#endif  // LLM_WORKER_SERVER_WORKER_CONFIG_H_
