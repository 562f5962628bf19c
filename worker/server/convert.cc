#include "worker/server/convert.h"

#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "worker/server/device_monitor.h"

namespace llm::server {

namespace {

// A JSON field of the chat form: `type` "array" or "object"; empty text is `fallback`.
absl::StatusOr<nlohmann::ordered_json> ChatJson(const std::string& text, const std::string& field,
                                                bool want_array, nlohmann::ordered_json fallback) {
  if (text.empty()) return fallback;
  auto j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || (want_array ? !j.is_array() : !j.is_object())) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": not a JSON ", want_array ? "array" : "object", " ('", text.substr(0, 40), "')"));
  }
  // Before the template's values are made from it (a recursion per level).
  if (JsonNestsDeeperThan(j, kMaxJsonNesting)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": nests deeper than ", kMaxJsonNesting, " levels"));
  }
  return j;
}

// OpenAI sends a call's arguments as a JSON string; templates iterate over them as a mapping
// (`arguments | items`, `| tojson`). Strings holding an object become that object.
void ArgumentsAsObjects(nlohmann::ordered_json& calls) {
  for (auto& call : calls) {
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
    auto& f = call["function"];
    if (!f.contains("arguments") || !f["arguments"].is_string()) continue;
    auto args = nlohmann::ordered_json::parse(f["arguments"].get<std::string>(), nullptr,
                                              /*allow_exceptions=*/false);
    if (!args.is_discarded() && args.is_object() && !JsonNestsDeeperThan(args, kMaxJsonNesting)) {
      f["arguments"] = std::move(args);
    }
  }
}

}  // namespace

absl::StatusOr<loop::ChatPrompt> ToChat(const llm::v1::Chat& c) {
  loop::ChatPrompt chat;
  for (int i = 0; i < c.messages_size(); ++i) {
    const llm::v1::ChatMessage& m = c.messages(i);
    nlohmann::ordered_json j = {{"role", m.role()}, {"content", m.content()}};
    if (!m.name().empty()) j["name"] = m.name();
    if (!m.tool_call_id().empty()) j["tool_call_id"] = m.tool_call_id();
    if (!m.reasoning_content().empty()) j["reasoning_content"] = m.reasoning_content();
    if (!m.tool_calls_json().empty()) {
      auto calls = ChatJson(m.tool_calls_json(),
                            absl::StrCat("chat.messages[", i, "].tool_calls_json"), true, nullptr);
      if (!calls.ok()) return calls.status();
      j["tool_calls"] = *std::move(calls);
      ArgumentsAsObjects(j["tool_calls"]);
    }
    chat.messages.push_back(std::move(j));
  }
  auto tools = ChatJson(c.tools_json(), "chat.tools_json", true, nullptr);
  if (!tools.ok()) return tools.status();
  chat.tools = *std::move(tools);
  auto kwargs = ChatJson(c.template_kwargs_json(), "chat.template_kwargs_json", false,
                         nlohmann::ordered_json::object());
  if (!kwargs.ok()) return kwargs.status();
  chat.kwargs = *std::move(kwargs);
  chat.add_generation_prompt = c.has_add_generation_prompt() ? c.add_generation_prompt() : true;
  if (c.continue_final_message()) {
    if (c.has_add_generation_prompt() && c.add_generation_prompt()) {
      return absl::InvalidArgumentError(
          "chat.continue_final_message: not with add_generation_prompt true");
    }
    if (c.messages_size() == 0 || c.messages(c.messages_size() - 1).role() != "assistant") {
      return absl::InvalidArgumentError(
          "chat.continue_final_message: the last message must be the assistant's");
    }
    chat.continue_final_message = true;
    chat.add_generation_prompt = false;
  }
  switch (c.tool_choice().mode()) {
    case llm::v1::ToolChoice::TOOL_CHOICE_NONE:
      chat.tool_choice.mode = tools::ToolChoice::Mode::kNone;
      break;
    case llm::v1::ToolChoice::TOOL_CHOICE_REQUIRED:
      chat.tool_choice.mode = tools::ToolChoice::Mode::kRequired;
      break;
    case llm::v1::ToolChoice::TOOL_CHOICE_FUNCTION:
      chat.tool_choice.mode = tools::ToolChoice::Mode::kFunction;
      chat.tool_choice.function = c.tool_choice().function_name();
      break;
    default:
      break;
  }
  chat.parallel_tool_calls = !c.has_parallel_tool_calls() || c.parallel_tool_calls();
  return chat;
}

void SetPrompt(const llm::v1::BatchPrompt& prompt, loop::GenerateSpec& spec) {
  spec.has_text = prompt.prompt_case() != llm::v1::BatchPrompt::kTokenIds;
  spec.text = spec.has_text ? prompt.text() : std::string();
  spec.token_ids.clear();
  if (!spec.has_text) {
    spec.token_ids.assign(prompt.token_ids().ids().begin(), prompt.token_ids().ids().end());
  }
}

absl::StatusOr<loop::GenerateSpec> ToSpec(const llm::v1::GenerateRequest& r) {
  loop::GenerateSpec s;
  s.arrival = loop::Clock::now();
  s.request_id = r.request_id();
  if (r.prompt_case() == llm::v1::GenerateRequest::kChat) {
    auto chat = ToChat(r.chat());
    if (!chat.ok()) return chat.status();
    s.has_text = true;
    s.chat = *std::move(chat);
  } else if (r.prompt_case() == llm::v1::GenerateRequest::kTokenIds) {
    s.has_text = false;
    s.token_ids.assign(r.token_ids().ids().begin(), r.token_ids().ids().end());
  } else {
    s.has_text = true;
    s.text = r.text();  // empty when no prompt was set: rejected by validation
  }
  s.add_special_tokens = r.has_add_special_tokens() ? r.add_special_tokens() : true;
  s.max_tokens = r.max_tokens();
  s.max_tokens_fit = r.max_tokens_fit();
  s.model = r.model();
  const auto& sp = r.sampling();
  s.sampling.temperature = sp.has_temperature() ? sp.temperature() : 1.0f;
  s.sampling.top_k = sp.top_k();
  s.sampling.top_p = sp.has_top_p() ? sp.top_p() : 1.0f;
  s.sampling.min_p = sp.min_p();
  s.sampling.repetition_penalty = sp.has_repetition_penalty() ? sp.repetition_penalty() : 1.0f;
  s.sampling.presence_penalty = sp.presence_penalty();
  s.sampling.frequency_penalty = sp.frequency_penalty();
  s.sampling.logit_bias.assign(sp.logit_bias().begin(), sp.logit_bias().end());
  std::sort(s.sampling.logit_bias.begin(), s.sampling.logit_bias.end());
  if (sp.has_seed()) {
    s.sampling.seed = sp.seed();
  } else {
    thread_local std::mt19937_64 rng(std::random_device{}());
    s.sampling.seed = rng();
  }
  s.stop.assign(r.stop().begin(), r.stop().end());
  s.stop_token_ids.assign(r.stop_token_ids().begin(), r.stop_token_ids().end());
  s.ignore_eos = r.ignore_eos();
  s.speculative = !r.has_speculative() || r.speculative();
  switch (r.constraint().kind_case()) {
    case llm::v1::Constraint::kRegex:
      s.constraint.kind = constraint::Kind::kRegex;
      s.constraint.text = r.constraint().regex();
      break;
    case llm::v1::Constraint::kChoice:
      s.constraint.kind = constraint::Kind::kChoice;
      s.constraint.choices.assign(r.constraint().choice().choices().begin(),
                                  r.constraint().choice().choices().end());
      break;
    case llm::v1::Constraint::kJsonObject:
      if (r.constraint().json_object()) s.constraint.kind = constraint::Kind::kJsonObject;
      break;
    case llm::v1::Constraint::kJsonSchema:
      s.constraint.kind = constraint::Kind::kJsonSchema;
      s.constraint.text = r.constraint().json_schema();
      break;
    case llm::v1::Constraint::kGrammar:
      s.constraint.kind = constraint::Kind::kGrammar;
      s.constraint.text = r.constraint().grammar();
      break;
    case llm::v1::Constraint::KIND_NOT_SET:
      break;
  }
  s.logprobs = r.logprobs();
  if (r.has_prompt_logprobs()) s.prompt_logprobs = r.prompt_logprobs();
  const auto& so = r.stream();
  s.include_prompt_ids = so.include_prompt_ids();
  s.skip_special_tokens = so.has_skip_special_tokens() ? so.skip_special_tokens() : true;
  s.continuous_usage = so.continuous_usage();
  s.include_stop_str = so.include_stop_str_in_output();
  return s;
}

namespace {

llm::v1::FinishReason ToProto(sampling::FinishReason r) {
  switch (r) {
    case sampling::FinishReason::kStopToken:
    case sampling::FinishReason::kStopString:
      return llm::v1::FINISH_REASON_STOP;  // stop_token_id or stop_string says which
    case sampling::FinishReason::kLength:
      return llm::v1::FINISH_REASON_LENGTH;
    case sampling::FinishReason::kError:
      return llm::v1::FINISH_REASON_ERROR;
    case sampling::FinishReason::kNone:
      break;
  }
  return llm::v1::FINISH_REASON_UNSPECIFIED;
}

void ToProto(const loop::LogprobEntry& e, llm::v1::TokenLogprob& out) {
  out.set_token_id(e.token_id);
  out.set_logprob(e.logprob);
  out.set_text(e.text);
  out.set_bytes(e.bytes);
  if (e.rank > 0) out.set_rank(static_cast<uint32_t>(e.rank));
}

}  // namespace

void ToResponse(const std::string& request_id, const loop::StreamUpdate& u,
                llm::v1::GenerateResponse& out) {
  out.Clear();
  out.set_request_id(request_id);
  out.set_text(u.text);
  out.set_reasoning_text(u.reasoning);
  out.mutable_token_ids()->Add(u.token_ids.begin(), u.token_ids.end());
  for (const auto& lp : u.logprobs) {
    auto* l = out.add_logprobs();
    ToProto(lp.sampled, *l->mutable_sampled());
    for (const auto& t : lp.top) ToProto(t, *l->add_top());
  }
  out.mutable_prompt_token_ids()->Add(u.prompt_ids.begin(), u.prompt_ids.end());
  for (const auto& lp : u.prompt_logprobs) {
    auto* l = out.add_prompt_logprobs();
    ToProto(lp.sampled, *l->mutable_sampled());
    for (const auto& t : lp.top) ToProto(t, *l->add_top());
  }
  for (const loop::ToolCall& c : u.tool_calls) {
    auto* call = out.add_tool_calls();
    call->set_index(static_cast<uint32_t>(c.index));
    call->set_id(c.id);
    call->set_name(c.name);
    call->set_arguments(c.arguments);
  }
  if (u.finished) {
    const llm::v1::FinishReason reason = ToProto(u.reason);
    const bool tool_calls = u.called_tools && reason == llm::v1::FINISH_REASON_STOP;
    out.set_finish_reason(tool_calls ? llm::v1::FINISH_REASON_TOOL_CALLS : reason);
    if (!u.stop_string.empty()) {
      out.set_stop_string(u.stop_string);
    } else if (u.stop_token_id >= 0) {
      out.set_stop_token_id(u.stop_token_id);
    }
  }
  if (u.has_usage) {
    auto* usage = out.mutable_usage();
    usage->set_prompt_tokens(u.usage.prompt_tokens);
    usage->set_cached_prompt_tokens(static_cast<uint32_t>(u.usage.cached_prompt_tokens));
    usage->set_completion_tokens(u.usage.completion_tokens);
    usage->set_time_to_first_token_ms(u.usage.time_to_first_token_ms);
    usage->set_queue_time_ms(u.usage.queue_time_ms);
    usage->set_total_time_ms(u.usage.total_time_ms);
    usage->set_draft_tokens(static_cast<uint32_t>(u.usage.draft_tokens));
    usage->set_accepted_draft_tokens(static_cast<uint32_t>(u.usage.accepted_draft_tokens));
  }
}

grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

void ToLoadReport(const loop::WorkerLoad& load, const loop::Worker& worker, const LoadFacts& facts,
                  uint64_t sequence, llm::v1::LoadReport& r) {
  r.Clear();
  r.set_worker_id(facts.worker_id);
  r.set_sequence(sequence);
  r.set_timestamp_unix_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count());
  const auto& s = load.engine.scheduler;
  // Requests still being tokenized count as queued: they are accepted and waiting.
  const int64_t tokenizing =
      std::max<int64_t>(0, load.in_flight - s.queued_requests - s.running_requests);
  r.set_queued_requests(static_cast<uint32_t>(s.queued_requests + tokenizing));
  r.set_queued_prompt_tokens(static_cast<uint64_t>(s.queued_prompt_tokens));
  r.set_running_requests(s.running_requests);
  r.set_free_slots(s.free_slots);
  r.set_max_slots(s.max_slots);
  r.set_kv_blocks_used(s.kv_blocks_used);
  r.set_kv_blocks_total(s.kv_blocks_total);
  r.set_kv_blocks_cached(static_cast<uint32_t>(s.kv_blocks_cached));
  r.set_prefix_cache_query_tokens(static_cast<uint64_t>(s.prefix_query_tokens));
  r.set_prefix_cache_hit_tokens(static_cast<uint64_t>(s.prefix_hit_tokens));
  r.set_preempted_requests(static_cast<uint32_t>(s.preempted_requests));
  r.set_preemptions_total(s.preemptions);
  r.set_kv_block_tokens(worker.runner_info().sizes.block_tokens);
  r.set_step_time_ewma_ms(load.engine.step_time_ewma_ms);
  r.set_prefill_ms_per_token(load.engine.prefill_ms_per_token);
  r.set_busy_ratio(load.engine.busy_ratio);
  r.set_draining(load.draining);
  r.set_max_context_tokens(worker.limits().accepted_context());
  r.set_model(facts.model);
  for (const std::string& name : facts.served_names) r.add_served_names(name);
  auto* d = r.mutable_device();
  d->set_name(facts.device);
  d->set_busy_ratio(load.engine.busy_ratio);
  const DeviceSample sample = facts.monitor != nullptr ? facts.monitor->Latest() : DeviceSample{};
  d->set_utilization(sample.available ? sample.utilization : -1.0);
  d->set_memory_used_bytes(sample.available ? sample.memory_used_bytes
                                            : facts.memory_reserved_bytes);
  d->set_memory_total_bytes(sample.available ? sample.memory_total_bytes
                                             : facts.memory_total_bytes);
}

}  // namespace llm::server
