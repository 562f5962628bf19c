// The router's OpenAI-compatible HTTP front in process, against scripted fake workers, spoken to
// over raw sockets: response shapes, SSE framing (chunked, [DONE]), errors with their statuses,
// cancel on disconnect reaching the worker, many streams at once, keep-alive.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/router_server.h"
#include "tests/router/http_test_util.h"
#include "tests/test_util.h"
#include "tools/fake_worker/fake_worker.h"

namespace llm::router {
namespace {

using nlohmann::json;
using tools::FakeBehaviour;
using tools::FakeWorker;

class HttpFrontTest : public ::testing::Test {
 protected:
  void StartRouter(const std::vector<std::string>& workers, const std::string& token_file = "",
                   int64_t max_message_bytes = 0) {
    RouterConfig c;
    if (max_message_bytes > 0) c.proxy.max_message_bytes = max_message_bytes;
    c.security.token_file = token_file;
    c.listen = "127.0.0.1:0";
    c.metrics_listen = "";
    c.http_listen = "127.0.0.1:0";
    c.workers = workers;
    c.threads = 2;
    router_ = std::make_unique<RouterServer>(c);
    ASSERT_TRUE(router_->Start().ok());
    ASSERT_GT(router_->http_port(), 0);
  }
  void WaitHealthy(size_t n) {
    ASSERT_TRUE(llm::testing::WaitFor(
        [&] {
          size_t healthy = 0;
          for (const auto& v : router_->pool().Snapshot()) {
            healthy += v.healthy && v.fresh && !v.report.model.empty() ? 1 : 0;
          }
          return healthy >= n;
        },
        std::chrono::milliseconds(5000)))
        << "workers did not become healthy";
  }
  int Connect() { return llm::testing::ConnectLoopback(router_->http_port()); }
  HttpReply Request(const std::string& raw) {
    const int fd = Connect();
    Send(fd, raw);
    HttpReply r = ReadReply(fd);
    ::close(fd);
    return r;
  }
  // A 400 naming `param`.
  void ExpectBadParam(const std::string& path, const json& body, const std::string& param) {
    const HttpReply r = Request(Post(path, body.dump()));
    EXPECT_EQ(r.status, 400) << body.dump() << " -> " << r.body;
    const json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.contains("error")) << r.body;
    EXPECT_EQ(j["error"]["param"], param) << body.dump() << " -> " << r.body;
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
  }

  std::unique_ptr<RouterServer> router_;
};

TEST_F(HttpFrontTest, CompletionsAndChatInBothShapes) {
  FakeBehaviour b;
  b.messages = 4;
  b.text_bytes = 3;
  auto w = FakeWorker::Start(b);
  StartRouter({w->address()});
  WaitHealthy(1);

  HttpReply r = Request(
      Post("/v1/completions", R"({"model": "fake-model", "prompt": "hi", "max_tokens": 4})"));
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "fake-model");
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_TRUE(j["created"].is_number_integer());
  EXPECT_EQ(j["choices"][0]["text"], "xxxxxxxxxxxx");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["usage"], json({{"prompt_tokens", 3},
                              {"completion_tokens", 4},
                              {"total_tokens", 7},
                              {"prompt_tokens_details", {{"cached_tokens", 0}}}}));

  r = Request(Post("/v1/chat/completions",
                   R"({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]})"));
  ASSERT_EQ(r.status, 200) << r.body;
  j = json::parse(r.body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"], json({{"role", "assistant"}, {"content", "xxxxxxxxxxxx"}}));
  EXPECT_EQ(j["choices"][0]["logprobs"], nullptr);
  EXPECT_EQ(j["usage"]["total_tokens"], 7);

  // Streaming chat with usage: a role chunk first, content chunks, a finish chunk, the usage
  // chunk (no choices), then [DONE]; every chunk carries "usage": null until then.
  r = Request(
      Post("/v1/chat/completions",
           R"({"model": "fake-model", "stream": true, "stream_options": {"include_usage": true},
                       "messages": [{"role": "user", "content": "hi"}]})"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.headers.find("content-type: text/event-stream"), std::string::npos) << r.headers;
  ASSERT_TRUE(r.complete);
  bool done = false;
  std::vector<json> events = Events(r.body, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 3u) << r.body;
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  std::string finish;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    EXPECT_EQ(events[i]["object"], "chat.completion.chunk");
    EXPECT_EQ(events[i]["usage"], nullptr);
    const json& c = events[i]["choices"][0];
    if (c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
  }
  EXPECT_EQ(text, "xxxxxxxxxxxx");
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(events.back()["choices"], json::array());
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 4);

  // Streaming completions without usage.
  r = Request(
      Post("/v1/completions", R"({"model": "fake-model", "prompt": [1, 2, 3], "stream": true})"));
  ASSERT_EQ(r.status, 200);
  events = Events(r.body, &done);
  EXPECT_TRUE(done);
  text.clear();
  for (const auto& e : events) {
    EXPECT_FALSE(e.contains("usage"));
    text += e["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "xxxxxxxxxxxx");
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length");

  // A list of prompts to a worker that answers only the first (one older than the router,
  // which ignores more_prompts): an error saying so, not a choice left empty.
  r = Request(Post("/v1/completions", R"({"model": "fake-model", "prompt": ["hi", "ho"]})"));
  EXPECT_EQ(r.status, 500) << r.body;
  EXPECT_NE(r.body.find("1 choices unanswered"), std::string::npos) << r.body;
  r = Request(Post("/v1/completions",
                   R"({"model": "fake-model", "prompt": ["hi", "ho"], "stream": true})"));
  events = Events(r.body, &done);
  ASSERT_FALSE(events.empty()) << r.body;
  EXPECT_TRUE(events.back().contains("error")) << r.body;
}

TEST_F(HttpFrontTest, ModelsHealthAndPaths) {
  auto w = FakeWorker::Start(FakeBehaviour{});
  StartRouter({w->address()});
  WaitHealthy(1);
  HttpReply r = Request("GET /v1/models HTTP/1.1\r\nHost: t\r\n\r\n");
  ASSERT_EQ(r.status, 200);
  const json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], "fake-model");
  EXPECT_EQ(j["data"][0]["object"], "model");
  EXPECT_EQ(j["data"][0]["max_model_len"], 4096);                 // the worker's max_context_tokens
  EXPECT_GT(j["data"][0]["created"].get<int64_t>(), 1700000000);  // the router's start
  // One model's object (the SDK's models.retrieve), or a 404 naming it.
  r = Request("GET /v1/models/fake-model HTTP/1.1\r\nHost: t\r\n\r\n");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body), j["data"][0]);
  r = Request("GET /v1/models/fake%2Dmodel HTTP/1.1\r\nHost: t\r\n\r\n");  // percent-encoded
  EXPECT_EQ(r.status, 200) << r.body;
  r = Request("GET /v1/models/org/other HTTP/1.1\r\nHost: t\r\n\r\n");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "model_not_found");
  EXPECT_NE(r.body.find("'org/other'"), std::string::npos) << r.body;
  r = Request(Post("/v1/models/fake-model", "{}"));
  EXPECT_EQ(r.status, 405);
  r = Request("GET /health HTTP/1.1\r\nHost: t\r\n\r\n");
  EXPECT_EQ(r.status, 200);
  // X-Request-Id: the client's comes back (and is the worker's request id); without one, the
  // answer's own id; a malformed one is a 400 naming the header.
  const std::string completion = R"({"model": "fake-model", "prompt": "hi", "max_tokens": 2})";
  r = Request(Post("/v1/completions", completion, "X-Request-Id: trace-42\r\n"));
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.headers.find("x-request-id: trace-42"), std::string::npos) << r.headers;
  r = Request(Post("/v1/completions", completion));
  const std::string id = json::parse(r.body)["id"];
  EXPECT_NE(r.headers.find("x-request-id: " + id), std::string::npos) << r.headers;
  r = Request(Post("/v1/completions", R"({"model": "fake-model", "prompt": "hi", "stream": true})",
                   "x-request-id: s-1\r\n"));
  EXPECT_NE(r.headers.find("x-request-id: s-1"), std::string::npos) << r.headers;
  r = Request(
      Post("/v1/completions", completion, "X-Request-Id: " + std::string(129, 'a') + "\r\n"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "X-Request-Id");
  r = Request("GET /health HTTP/1.1\r\nHost: t\r\nX-Request-Id: h\r\n\r\n");
  EXPECT_NE(r.headers.find("x-request-id: h"), std::string::npos) << r.headers;
  r = Request("GET /health HTTP/1.1\r\nHost: t\r\n\r\n");  // not carried over
  EXPECT_EQ(r.headers.find("x-request-id"), std::string::npos) << r.headers;
  r = Request("GET /v1/nothing HTTP/1.1\r\nHost: t\r\n\r\n");
  EXPECT_EQ(r.status, 404);
  EXPECT_TRUE(json::parse(r.body).contains("error"));
  r = Request("GET /v1/completions HTTP/1.1\r\nHost: t\r\n\r\n");
  EXPECT_EQ(r.status, 405);
  r = Request(Post("/v1/completions", R"({"model": "other", "prompt": "x"})"));
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "model");
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "model_not_found");
  // Too large: 413 before the body is read.
  r = Request("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999\r\n\r\n{");
  EXPECT_EQ(r.status, 413);
  // Malformed JSON.
  r = Request(Post("/v1/completions", "{not json"));
  EXPECT_EQ(r.status, 400);
}

TEST_F(HttpFrontTest, EveryBadFieldIsA400NamingIt) {
  auto w = FakeWorker::Start(FakeBehaviour{});
  StartRouter({w->address()});
  WaitHealthy(1);
  const json chat = {{"model", "fake-model"},
                     {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  const auto with = [&](const char* key, json value) {
    json b = chat;
    b[key] = std::move(value);
    return b;
  };
  ExpectBadParam("/v1/chat/completions", json{{"model", "fake-model"}}, "messages");
  ExpectBadParam("/v1/chat/completions", json{{"messages", chat["messages"]}}, "model");
  ExpectBadParam("/v1/chat/completions", with("n", 17), "n");  // 1 to 16
  ExpectBadParam("/v1/chat/completions", with("tools", json::array({{{"type", "function"}}})),
                 "tools");
  ExpectBadParam("/v1/chat/completions", with("tool_choice", "required"), "tool_choice");
  ExpectBadParam("/v1/chat/completions", with("response_format", {{"type", "xml"}}),
                 "response_format");
  ExpectBadParam("/v1/chat/completions", with("response_format", {{"type", "json_schema"}}),
                 "response_format");
  ExpectBadParam("/v1/chat/completions", with("structured_outputs", {{"grammar", 5}}),
                 "structured_outputs.grammar");
  json two = with("guided_regex", "a+");
  two["structured_outputs"] = {{"choice", {"a"}}};
  ExpectBadParam("/v1/chat/completions", two, "guided_regex");
  ExpectBadParam("/v1/chat/completions", with("max_tokens", 0), "max_tokens");
  ExpectBadParam("/v1/chat/completions", with("max_completion_tokens", -1),
                 "max_completion_tokens");
  ExpectBadParam("/v1/chat/completions", with("temperature", "hot"), "temperature");
  ExpectBadParam("/v1/chat/completions", with("stop", 3), "stop");
  ExpectBadParam("/v1/chat/completions", with("top_logprobs", 3), "top_logprobs");
  ExpectBadParam("/v1/chat/completions", with("logprobs", 1), "logprobs");
  ExpectBadParam("/v1/chat/completions", with("stream_options", {{"include_usage", true}}),
                 "stream_options");
  ExpectBadParam("/v1/chat/completions", with("frobnicate", 1), "frobnicate");
  ExpectBadParam("/v1/chat/completions",
                 with("messages", json::array({{{"role", "robot"}, {"content", "x"}}})),
                 "messages[0].role");
  ExpectBadParam(
      "/v1/chat/completions",
      with("messages",
           json::array({{{"role", "user"}, {"content", json::array({{{"type", "image_url"}}})}}})),
      "messages[0].content[0].type");
  ExpectBadParam("/v1/completions", {{"model", "fake-model"}}, "prompt");
  ExpectBadParam("/v1/completions", {{"model", "fake-model"}, {"prompt", {"a", 3}}}, "prompt[1]");
  ExpectBadParam("/v1/completions", {{"model", "fake-model"}, {"prompt", "x"}, {"echo", "yes"}},
                 "echo");
  ExpectBadParam("/v1/completions", {{"model", "fake-model"}, {"prompt", "x"}, {"best_of", 3}},
                 "best_of");
  ExpectBadParam("/v1/completions", {{"model", "fake-model"}, {"prompt", "x"}, {"logprobs", 30}},
                 "logprobs");
  // The worker's own INVALID_ARGUMENT names its field; the front maps it to the API's name.
  w->SetBehaviour({.messages = 0,
                   .fail_code = grpc::StatusCode::INVALID_ARGUMENT,
                   .fail_message = "sampling.temperature: must be in [0, 2], got 9"});
  ExpectBadParam("/v1/completions", {{"model", "fake-model"}, {"prompt", "x"}, {"temperature", 9}},
                 "temperature");
}

TEST_F(HttpFrontTest, AMissingOrWrongBearerTokenIs401) {
  auto w = FakeWorker::Start(FakeBehaviour{});
  const std::string dir = llm::testing::MakeTempDir("http-token");
  std::ofstream(dir + "/token") << "s3cret\n";
  StartRouter({w->address()}, dir + "/token");
  WaitHealthy(1);
  const std::string body = R"({"model": "fake-model", "prompt": "x"})";
  for (const std::string& auth : {std::string(""), std::string("Authorization: Bearer nope\r\n")}) {
    const HttpReply r = Request(Post("/v1/completions", body, auth));
    EXPECT_EQ(r.status, 401) << auth;
    const json j = json::parse(r.body);
    EXPECT_EQ(j["error"]["type"], "authentication_error");
    EXPECT_EQ(j["error"]["code"], "invalid_api_key");
    EXPECT_NE(r.headers.find("www-authenticate: bearer"), std::string::npos);
  }
  EXPECT_EQ(Request("GET /v1/models HTTP/1.1\r\nHost: t\r\n\r\n").status, 401);
  EXPECT_EQ(Request(Post("/v1/completions", body, "Authorization: Bearer s3cret\r\n")).status, 200);
  EXPECT_EQ(w->generate_calls(), 1);
}

// POST /v1/responses over the wire: the Response, its typed events, a worker's failure after the
// start as response.failed, and errors named as the Responses API names its parameters.
TEST_F(HttpFrontTest, TheResponsesApiInBothShapes) {
  FakeBehaviour b;
  b.messages = 4;
  b.text_bytes = 3;
  auto w = FakeWorker::Start(b);
  StartRouter({w->address()});
  WaitHealthy(1);
  const std::string body = R"({"model": "fake-model", "input": "hi", "max_output_tokens": 4})";
  const auto with = [&body](const char* key, json value) {
    json j = json::parse(body);
    j[key] = std::move(value);
    return j;
  };
  HttpReply r = Request(Post("/v1/responses", body));
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "response");
  EXPECT_EQ(j["id"].get<std::string>().rfind("resp_", 0), 0u);
  EXPECT_NE(r.headers.find("x-request-id: " + j["id"].get<std::string>()), std::string::npos);
  EXPECT_EQ(j["status"], "incomplete");  // the fake ends on the length limit
  EXPECT_EQ(j["output"][0]["content"][0]["text"], "xxxxxxxxxxxx");
  EXPECT_EQ(j["usage"]["input_tokens"], 3);
  EXPECT_EQ(j["usage"]["output_tokens"], 4);

  r = Request(Post("/v1/responses", with("stream", true).dump()));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.headers.find("content-type: text/event-stream"), std::string::npos) << r.headers;
  std::vector<json> events = TypedEvents(r.body);
  ASSERT_GE(events.size(), 4u) << r.body;
  EXPECT_EQ(events.front()["type"], "response.created");
  EXPECT_EQ(events.back()["type"], "response.incomplete");
  EXPECT_EQ(events.back()["response"]["output"][0]["content"], j["output"][0]["content"]);
  EXPECT_EQ(r.body.find("[DONE]"), std::string::npos);

  b.fail_code = grpc::StatusCode::INTERNAL;
  b.fail_message = "the engine failed";
  w->SetBehaviour(b);
  r = Request(Post("/v1/responses", with("stream", true).dump()));
  events = TypedEvents(r.body);
  ASSERT_FALSE(events.empty()) << r.body;
  EXPECT_EQ(events.back()["type"], "response.failed");
  EXPECT_EQ(events.back()["response"]["error"]["message"], "the engine failed");

  b.messages = 0;
  b.fail_code = grpc::StatusCode::INVALID_ARGUMENT;
  b.fail_message = "chat.messages[0].content: the prompt is longer than the context";
  w->SetBehaviour(b);
  r = Request(Post("/v1/responses", body));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "input") << r.body;
  ExpectBadParam("/v1/responses", with("previous_response_id", "resp_1"), "previous_response_id");
  ExpectBadParam("/v1/responses", with("max_output_tokens", 0), "max_output_tokens");
  EXPECT_EQ(Request("GET /v1/responses HTTP/1.1\r\nHost: t\r\n\r\n").status, 405);
}

TEST_F(HttpFrontTest, OverloadIs429WithRetryAfterAndNoWorkerIs503) {
  auto w = FakeWorker::Start(FakeBehaviour{});
  llm::v1::LoadReport full = w->load();
  full.set_max_slots(8);
  full.set_free_slots(0);
  full.set_running_requests(8);
  full.set_queued_requests(100);
  w->SetLoad(full);
  StartRouter({w->address()});
  WaitHealthy(1);
  ASSERT_TRUE(llm::testing::WaitFor(
      [&] { return router_->pool().Snapshot()[0].report.queued_requests == 100; },
      std::chrono::milliseconds(1000)));
  HttpReply r = Request(Post("/v1/completions", R"({"model": "fake-model", "prompt": "x"})"));
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_NE(r.headers.find("retry-after: "), std::string::npos) << r.headers;
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "rate_limit_error");
  w->Shutdown();
  ASSERT_TRUE(llm::testing::WaitFor([&] { return !router_->pool().Snapshot()[0].healthy; },
                                    std::chrono::milliseconds(5000)));
  r = Request(Post("/v1/completions", R"({"model": "fake-model", "prompt": "x"})"));
  EXPECT_EQ(r.status, 503) << r.body;
}

TEST_F(HttpFrontTest, AClientThatLeavesMidStreamCancelsTheWorkersCall) {
  FakeBehaviour hold;
  hold.messages = 2;
  hold.hold = true;
  auto w = FakeWorker::Start(hold);
  StartRouter({w->address()});
  WaitHealthy(1);
  const int fd = Connect();
  Send(fd, Post("/v1/completions", R"({"model": "fake-model", "prompt": "x", "stream": true})"));
  // Wait for the first event, then hang up.
  std::string got;
  for (int i = 0; i < 500 && got.find("data: ") == std::string::npos; ++i) {
    char buf[4096];
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10) > 0) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n > 0) got.append(buf, static_cast<size_t>(n));
    }
  }
  ASSERT_NE(got.find("data: "), std::string::npos) << got;
  EXPECT_EQ(w->open_calls(), 1);
  ::close(fd);
  EXPECT_TRUE(
      llm::testing::WaitFor([&] { return w->open_calls() == 0; }, std::chrono::milliseconds(5000)))
      << w->open_calls() << " calls still open at the worker";
  EXPECT_EQ(w->cancelled_calls(), 1);
}

TEST_F(HttpFrontTest, HundredsOfConcurrentStreamsAndKeepAlive) {
  FakeBehaviour b;
  b.messages = 16;
  auto w = FakeWorker::Start(b);
  StartRouter({w->address()});
  WaitHealthy(1);
  constexpr int kStreams = 200;
  std::vector<int> fds;
  const std::string req = Post("/v1/chat/completions", R"({"model": "fake-model", "stream": true,
           "messages": [{"role": "user", "content": "hi"}]})");
  for (int i = 0; i < kStreams; ++i) {
    fds.push_back(Connect());
    Send(fds.back(), req);
  }
  int ok = 0;
  for (int fd : fds) {
    const HttpReply r = ReadReply(fd);
    bool done = false;
    const auto events = Events(r.body, &done);
    ok += r.status == 200 && done && events.size() == 17
              ? 1
              : 0;  // 16 content (the first with the role), finish
    // Keep-alive: the same connection takes another request.
    Send(fd, Post("/v1/completions", R"({"model": "fake-model", "prompt": "x"})"));
    EXPECT_EQ(ReadReply(fd).status, 200);
    ::close(fd);
  }
  EXPECT_EQ(ok, kStreams);
}

// Bodies that once crashed the router (an uncaught exception, a recursion over a deep value)
// are 400s naming the field, and the router goes on serving.
TEST_F(HttpFrontTest, HostileBodiesAre400sAndTheRouterLives) {
  auto w = FakeWorker::Start(FakeBehaviour{});
  StartRouter({w->address()});
  WaitHealthy(1);
  const std::string chat =
      R"("model": "fake-model", "messages": [{"role": "user", "content": "hi"}])";
  for (const char* format : {R"({"type": 5})", R"({"type": null})", R"({"type": []})", "{}"}) {
    ExpectBadParam("/v1/chat/completions",
                   json::parse("{" + chat + R"(, "response_format": )" + format + "}"),
                   "response_format");
  }
  // 100,000 levels (200 KB): nlohmann's dump and the worker's template values recurse.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const std::string field : {"chat_template_kwargs", "metadata"}) {
    const std::string value = field == "metadata" ? deep : R"({"x": )" + deep + "}";
    const HttpReply r = Request(
        Post("/v1/chat/completions", "{" + chat + R"(, ")" + field + R"(": )" + value + "}"));
    EXPECT_EQ(r.status, 400) << field;
    EXPECT_EQ(json::parse(r.body)["error"]["param"], field) << r.body;
  }
  const HttpReply calls =
      Request(Post("/v1/chat/completions",
                   R"({"model": "fake-model", "messages": [{"role": "assistant", "tool_calls": )" +
                       deep + "}]}"));
  EXPECT_EQ(calls.status, 400);
  EXPECT_EQ(json::parse(calls.body)["error"]["param"], "messages") << calls.body;
  // 64 levels in all is accepted.
  const std::string ok_nesting = std::string(61, '[') + std::string(61, ']');
  EXPECT_EQ(Request(Post("/v1/chat/completions",
                         "{" + chat + R"(, "chat_template_kwargs": {"x": )" + ok_nesting + "}}"))
                .status,
            200);
  // Integers past int64 (exactly, and as a float whose cast was undefined).
  for (const char* seed : {"9223372036854775808", "9.223372036854775808e18", "-1e19"}) {
    ExpectBadParam("/v1/chat/completions", json::parse("{" + chat + R"(, "seed": )" + seed + "}"),
                   "seed");
  }
  // Token ids as floats: named as token ids, not as several prompts.
  const HttpReply floats =
      Request(Post("/v1/completions", R"({"model": "fake-model", "prompt": [1.0, 2]})"));
  EXPECT_EQ(floats.status, 400);
  EXPECT_NE(floats.body.find("token ids"), std::string::npos) << floats.body;
  // The worker's field paths map to the API's parameter.
  for (const auto& [message, param] : std::vector<std::pair<std::string, std::string>>{
           {"token_ids.ids[1]: 5000 is outside the vocabulary", "prompt"},
           {"stop[2]: empty", "stop"},
           {"chat.messages[0].content: invalid UTF-8", "messages"}}) {
    w->SetBehaviour(
        {.messages = 0, .fail_code = grpc::StatusCode::INVALID_ARGUMENT, .fail_message = message});
    ExpectBadParam("/v1/completions", {{"model", "fake-model"}, {"prompt", "x"}}, param);
  }
  EXPECT_EQ(Request("GET /health HTTP/1.1\r\nHost: t\r\n\r\n").status, 200);
}

// A body over the limit that arrives whole in one read is a 413 (it was parsed, and refused as
// "not valid JSON"), and an error after a HEAD still carries its body (HEAD's no-body flag
// outlived its request).
TEST_F(HttpFrontTest, OneReadOversizedBodyIs413AndHeadDoesNotLinger) {
  auto w = FakeWorker::Start(FakeBehaviour{});
  StartRouter({w->address()}, "", /*max_message_bytes=*/1024);
  WaitHealthy(1);
  const HttpReply big = Request(Post("/v1/completions", std::string(2048, ' ') + "{}"));
  EXPECT_EQ(big.status, 413) << big.body;
  const int fd = Connect();
  Send(fd, "HEAD /health HTTP/1.1\r\nHost: t\r\n\r\n\x01garbage");
  const std::string in = ReadToEnd(fd);
  ::close(fd);
  const size_t second = in.find("HTTP/1.1 400");
  ASSERT_NE(second, std::string::npos) << in;
  EXPECT_NE(in.find("malformed HTTP request", second), std::string::npos) << in;
}

// HTTP/1.1 details: thousands of requests pipelined behind one call are all answered, in order
// (they were parsed by a recursion per request, which overflowed the stack); Expect:
// 100-continue is answered before the body; HEAD gets headers only; HTTP/1.0 keep-alive says so.
TEST_F(HttpFrontTest, PipeliningExpectContinueHeadAndHttp10KeepAlive) {
  FakeBehaviour b;
  b.messages = 4;
  b.per_message_delay = std::chrono::milliseconds(50);  // the health checks pile up behind it
  auto w = FakeWorker::Start(b);
  StartRouter({w->address()});
  WaitHealthy(1);
  {
    constexpr int kHealth = 20000;
    std::string bytes = Post("/v1/completions", R"({"model": "fake-model", "prompt": "x"})");
    for (int i = 0; i < kHealth; ++i) bytes += "GET /health HTTP/1.1\r\nHost: t\r\n\r\n";
    bytes += "GET /v1/models HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    const int fd = Connect();
    Send(fd, bytes);
    const std::string in = ReadToEnd(fd);
    ::close(fd);
    EXPECT_EQ(Count(in, "HTTP/1.1 200 OK\r\n"), size_t{kHealth + 2});
    EXPECT_EQ(Count(in, R"({"status":"ok"})"), size_t{kHealth});
    EXPECT_LT(in.find("text_completion"), in.find(R"({"status":"ok"})"));
    EXPECT_NE(in.find(R"("object":"list")"), std::string::npos);
  }
  {
    const std::string body = R"({"model": "fake-model", "prompt": "x"})";
    const int fd = Connect();
    Send(fd,
         "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
         "Expect: 100-continue\r\nContent-Length: " +
             std::to_string(body.size()) + "\r\n\r\n");
    std::string interim;
    while (interim.find("\r\n\r\n") == std::string::npos) {
      pollfd p{fd, POLLIN, 0};
      ASSERT_GT(::poll(&p, 1, 10000), 0) << "no 100 Continue";
      char c;
      ASSERT_EQ(::read(fd, &c, 1), 1);
      interim += c;
    }
    EXPECT_EQ(interim, "HTTP/1.1 100 Continue\r\n\r\n");
    Send(fd, body);
    EXPECT_EQ(ReadReply(fd).status, 200);
    ::close(fd);
  }
  {
    const int fd = Connect();
    Send(fd,
         "HEAD /health HTTP/1.1\r\nHost: t\r\n\r\nGET /health HTTP/1.1\r\nHost: t\r\n"
         "Connection: close\r\n\r\n");
    const std::string in = ReadToEnd(fd);
    ::close(fd);
    const size_t head_end = in.find("\r\n\r\n");
    ASSERT_NE(head_end, std::string::npos) << in;
    EXPECT_NE(in.substr(0, head_end).find("Content-Length: 15"), std::string::npos) << in;
    EXPECT_EQ(in.substr(head_end + 4, 9), "HTTP/1.1 ") << in;  // no body between the two
    EXPECT_EQ(Count(in, R"({"status":"ok"})"), 1u) << in;
  }
  {
    const int fd = Connect();
    Send(fd, "GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    const HttpReply r = ReadReply(fd);
    EXPECT_EQ(r.status, 200);
    EXPECT_NE(r.headers.find("connection: keep-alive"), std::string::npos) << r.headers;
    Send(fd, "GET /health HTTP/1.0\r\n\r\n");  // the same connection still answers
    EXPECT_EQ(ReadReply(fd).status, 200);
    ::close(fd);
  }
}

}  // namespace
}  // namespace llm::router
