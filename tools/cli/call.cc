// llm-cli call / llm-cli load: gRPC clients of a worker or router.
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/strip.h"
#include "common/tls/grpc_tls.h"
#include "llm/v1/generation.grpc.pb.h"
#include "llm/v1/worker_load.grpc.pb.h"
#include "tools/cli/commands.h"
#include "tools/common/tool_util.h"

namespace llm::cli {

using tools::AddSamplingFlags;
using tools::Fail;
using tools::ParseOrExit;
using tools::ReadSamplingFlags;

namespace {

// gRPC's status codes have the same numbers as absl's.
std::string CodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

const char* FinishName(llm::v1::FinishReason r) {
  switch (r) {
    case llm::v1::FINISH_REASON_STOP:
      return "stop";
    case llm::v1::FINISH_REASON_LENGTH:
      return "length";
    case llm::v1::FINISH_REASON_CANCELLED:
      return "cancelled";
    case llm::v1::FINISH_REASON_ERROR:
      return "error";
    case llm::v1::FINISH_REASON_TOOL_CALLS:
      return "tool_calls";
    default:
      return "unspecified";
  }
}

void AddConnectionFlags(FlagSet& flags) {
  flags.Value("ca", "PEM CA bundle the server's certificate must chain to (turns TLS on)")
      .Value("cert", "PEM client certificate (mutual TLS)")
      .Value("key", "PEM private key of --cert")
      .Value("server-name", "name to check in the server's certificate instead of the host")
      .Value("token-file", "file holding a bearer token to send (authorization: Bearer ...)");
}

// A channel to --target, with TLS when --ca is given.
absl::StatusOr<std::shared_ptr<grpc::Channel>> Connect(const FlagSet& flags) {
  tls::TlsFiles files;
  files.ca_file = flags.GetString("ca");
  files.cert_file = flags.GetString("cert");
  files.key_file = flags.GetString("key");
  files.server_name = flags.GetString("server-name");
  if (absl::Status st = tls::CheckClientFiles(files, "--"); !st.ok()) return st;
  grpc::ChannelArguments args;
  auto credentials = tls::ChannelCredentials(files, &args);
  return grpc::CreateCustomChannel(flags.GetString("target"), credentials, args);
}

// Adds the bearer token of --token-file to `ctx`.
absl::Status AddToken(const FlagSet& flags, grpc::ClientContext& ctx) {
  const std::string path = flags.GetString("token-file");
  if (path.empty()) return absl::OkStatus();
  std::string token;
  if (absl::Status st = tls::ReadFile(path, "--token-file", &token); !st.ok()) return st;
  ctx.AddMetadata("authorization", "Bearer " + std::string(absl::StripAsciiWhitespace(token)));
  return absl::OkStatus();
}

}  // namespace

// Structured output: at most one of --regex, --choice (repeatable), --json-object,
// --json-schema FILE and --grammar FILE becomes the request's constraint.
absl::Status ReadConstraintFlags(const FlagSet& flags, llm::v1::GenerateRequest& req) {
  int given = 0;
  llm::v1::Constraint* c = req.mutable_constraint();
  if (!flags.GetString("regex").empty()) {
    c->set_regex(flags.GetString("regex"));
    ++given;
  }
  if (!flags.GetAll("choice").empty()) {
    for (const auto& choice : flags.GetAll("choice")) c->mutable_choice()->add_choices(choice);
    ++given;
  }
  if (flags.GetBool("json-object")) {
    c->set_json_object(true);
    ++given;
  }
  for (const char* key : {"json-schema", "grammar"}) {
    const std::string path = flags.GetString(key);
    if (path.empty()) continue;
    std::string text;
    if (absl::Status st = tls::ReadFile(path, std::string("--") + key, &text); !st.ok()) return st;
    if (std::string_view(key) == "grammar") {
      c->set_grammar(text);
    } else {
      c->set_json_schema(text);
    }
    ++given;
  }
  if (given > 1) {
    return absl::InvalidArgumentError(
        "--regex, --choice, --json-object, --json-schema and --grammar: give one");
  }
  if (given == 0) req.clear_constraint();
  return absl::OkStatus();
}

int RunCall(const std::vector<std::string>& args) {
  const std::string cmd = "llm-cli call";
  FlagSet flags;
  flags.Value("target", "worker or router address, host:port")
      .Value("prompt", "prompt text")
      .Value("model", "the model to answer (empty: the only one the target serves)")
      .Value("max-tokens", "tokens to generate at most (0: the server's default)", "0")
      .Value("stop", "stop string (repeatable)")
      .Value("timeout-ms", "deadline of the call (0: none)", "0")
      .Value("request-id", "request id to send")
      .Bool("ignore-eos", "keep going after EOS")
      .Bool("quiet", "print only the completion (no usage line on stderr)")
      .Value("regex", "constrain the output to this regular expression")
      .Value("choice", "constrain the output to one of these strings (repeatable)")
      .Bool("json-object", "constrain the output to a JSON object")
      .Value("json-schema", "file holding a JSON Schema the output must validate under")
      .Value("grammar", "file holding a GBNF grammar whose root rule the output is");
  AddSamplingFlags(flags);
  AddConnectionFlags(flags);
  if (int rc = ParseOrExit(cmd, flags, args); rc >= 0) return rc;
  if (absl::Status st = flags.Require({"target", "prompt"}); !st.ok()) return Fail(cmd, st);
  auto sampling = ReadSamplingFlags(flags);
  if (!sampling.ok()) return Fail(cmd, sampling.status());
  auto max_tokens = flags.GetInt("max-tokens");
  auto timeout_ms = flags.GetInt("timeout-ms");
  if (!max_tokens.ok()) return Fail(cmd, max_tokens.status());
  if (!timeout_ms.ok()) return Fail(cmd, timeout_ms.status());

  llm::v1::GenerateRequest req;
  req.set_request_id(flags.GetString("request-id"));
  req.set_text(flags.GetString("prompt"));
  req.set_model(flags.GetString("model"));
  req.set_max_tokens(static_cast<uint32_t>(std::max<int64_t>(0, *max_tokens)));
  auto* sp = req.mutable_sampling();
  sp->set_temperature(sampling->temperature);
  sp->set_top_k(static_cast<uint32_t>(sampling->top_k));
  sp->set_top_p(sampling->top_p);
  sp->set_min_p(sampling->min_p);
  sp->set_repetition_penalty(sampling->repetition_penalty);
  sp->set_presence_penalty(sampling->presence_penalty);
  sp->set_frequency_penalty(sampling->frequency_penalty);
  sp->set_seed(sampling->seed);
  for (const auto& s : flags.GetAll("stop")) req.add_stop(s);
  req.set_ignore_eos(flags.GetBool("ignore-eos"));
  if (absl::Status st = ReadConstraintFlags(flags, req); !st.ok()) return Fail(cmd, st);

  auto channel = Connect(flags);
  if (!channel.ok()) return Fail(cmd, channel.status());
  auto stub = llm::v1::Generation::NewStub(*channel);
  grpc::ClientContext ctx;
  if (absl::Status st = AddToken(flags, ctx); !st.ok()) return Fail(cmd, st);
  if (*timeout_ms > 0) {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(*timeout_ms));
  }
  auto reader = stub->Generate(&ctx, req);
  llm::v1::GenerateResponse resp;
  llm::v1::GenerateResponse last;
  while (reader->Read(&resp)) {
    std::fputs(resp.text().c_str(), stdout);
    std::fflush(stdout);
    if (resp.finish_reason() != llm::v1::FINISH_REASON_UNSPECIFIED) last = resp;
  }
  const grpc::Status status = reader->Finish();
  std::fputs("\n", stdout);
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s: %s\n", cmd.c_str(), CodeName(status.error_code()).c_str(),
                 status.error_message().c_str());
    return 1;
  }
  if (!flags.GetBool("quiet")) {
    std::fprintf(stderr,
                 "[finish=%s prompt_tokens=%u completion_tokens=%u ttft_ms=%.1f total_ms=%.1f]\n",
                 FinishName(last.finish_reason()), last.usage().prompt_tokens(),
                 last.usage().completion_tokens(), last.usage().time_to_first_token_ms(),
                 last.usage().total_time_ms());
  }
  return 0;
}

int RunLoad(const std::vector<std::string>& args) {
  const std::string cmd = "llm-cli load";
  FlagSet flags;
  flags.Value("target", "worker address, host:port")
      .Value("count", "reports to print before exiting (0: until interrupted)", "0")
      .Value("interval-ms", "lower bound between reports (0: the worker's default)", "0");
  AddConnectionFlags(flags);
  if (int rc = ParseOrExit(cmd, flags, args); rc >= 0) return rc;
  if (absl::Status st = flags.Require({"target"}); !st.ok()) return Fail(cmd, st);
  auto count = flags.GetInt("count");
  auto interval = flags.GetInt("interval-ms");
  if (!count.ok()) return Fail(cmd, count.status());
  if (!interval.ok()) return Fail(cmd, interval.status());
  auto channel = Connect(flags);
  if (!channel.ok()) return Fail(cmd, channel.status());
  auto stub = llm::v1::WorkerLoad::NewStub(*channel);
  grpc::ClientContext ctx;
  llm::v1::WatchLoadRequest req;
  req.set_min_interval_ms(static_cast<uint32_t>(std::max<int64_t>(0, *interval)));
  req.set_watcher("llm-cli");
  auto reader = stub->WatchLoad(&ctx, req);
  llm::v1::LoadReport report;
  int64_t n = 0;
  google::protobuf::util::JsonPrintOptions opts;
  opts.always_print_primitive_fields = true;
  opts.preserve_proto_field_names = true;
  while (reader->Read(&report)) {
    std::string json;
    (void)google::protobuf::util::MessageToJsonString(report, &json, opts);
    std::printf("%s\n", json.c_str());
    std::fflush(stdout);
    if (*count > 0 && ++n >= *count) {
      ctx.TryCancel();
      break;
    }
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED) {
    std::fprintf(stderr, "%s: %s: %s\n", cmd.c_str(), CodeName(status.error_code()).c_str(),
                 status.error_message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace llm::cli
