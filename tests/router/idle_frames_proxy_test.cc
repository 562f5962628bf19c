// A client that slips (RST_STREAM, WINDOW_UPDATE or DATA for streams it never opened, as Python
// grpcio does when it cancels a call before sending its HEADERS) loses nothing: its live streams
// on the same connection finish, and the router answers the slip per stream or not at all. Only
// a flood of such frames ends the connection (GOAWAY ENHANCE_YOUR_CALM).
//
// The client is a raw nghttp2 client session on a blocking socket, so the test can write frames
// between the ones the session makes.
#include <arpa/inet.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "llm/v1/generation.pb.h"
#include "router/router_server.h"
#include "tests/test_util.h"
#include "tools/fake_worker/fake_worker.h"

namespace llm::router {
namespace {

using tools::FakeBehaviour;
using tools::FakeWorker;

std::string Frame(uint8_t type, int32_t id, const std::string& payload) {
  std::string f;
  const uint32_t n = static_cast<uint32_t>(payload.size());
  for (const uint32_t b : {n >> 16, n >> 8, n, uint32_t{type}, 0u})
    f.push_back(static_cast<char>(b));
  for (const int shift : {24, 16, 8, 0}) f.push_back(static_cast<char>((id >> shift) & 0xff));
  return f + payload;
}
std::string Rst(int32_t id) { return Frame(0x3, id, std::string("\0\0\0\x8", 4)); }
std::string WindowUpdate(int32_t id) { return Frame(0x8, id, std::string("\0\0\x10\0", 4)); }
std::string Data(int32_t id) { return Frame(0x0, id, std::string(32, 'x')); }

class RawH2Client {
 public:
  struct Stream {
    bool closed = false;
    uint32_t error_code = 0;  // of the RST_STREAM that closed it, 0 when it ended normally
    std::string grpc_status;
    size_t data_bytes = 0;
  };

  explicit RawH2Client(int port) : fd_(llm::testing::ConnectLoopback(port)) {
    nghttp2_session_callbacks* cbs;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_header_callback(
        cbs, [](nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t name_len,
                const uint8_t* value, size_t value_len, uint8_t, void* self) {
          if (std::string_view(reinterpret_cast<const char*>(name), name_len) == "grpc-status") {
            static_cast<RawH2Client*>(self)->streams_[frame->hd.stream_id].grpc_status =
                std::string(reinterpret_cast<const char*>(value), value_len);
          }
          return 0;
        });
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
        cbs, [](nghttp2_session*, uint8_t, int32_t id, const uint8_t*, size_t len, void* self) {
          static_cast<RawH2Client*>(self)->streams_[id].data_bytes += len;
          return 0;
        });
    nghttp2_session_callbacks_set_on_stream_close_callback(
        cbs, [](nghttp2_session*, int32_t id, uint32_t error_code, void* self) {
          auto& s = static_cast<RawH2Client*>(self)->streams_[id];
          s.closed = true;
          s.error_code = error_code;
          return 0;
        });
    nghttp2_session_callbacks_set_on_frame_recv_callback(
        cbs, [](nghttp2_session*, const nghttp2_frame* frame, void* self) {
          if (frame->hd.type == NGHTTP2_GOAWAY) {
            static_cast<RawH2Client*>(self)->goaway_code_ = frame->goaway.error_code;
          }
          return 0;
        });
    nghttp2_session_client_new(&session_, cbs, this);
    nghttp2_session_callbacks_del(cbs);
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, nullptr, 0);
    Flush();
  }
  ~RawH2Client() {
    nghttp2_session_del(session_);
    if (fd_ >= 0) ::close(fd_);
  }

  // Submits a Generate call (the request whole, END_STREAM) and returns its stream id.
  int32_t Generate() {
    llm::v1::GenerateRequest req;
    req.set_text("hello");
    std::string body(5, '\0');
    const std::string msg = req.SerializeAsString();
    for (int i = 0; i < 4; ++i) body[1 + i] = static_cast<char>(msg.size() >> (24 - 8 * i));
    body += msg;
    return Submit(body, /*end_stream=*/true);
  }
  // Submits a Generate call whose request is `body` and, without `end_stream`, never ends (the
  // client's side of the stream stays open).
  int32_t Submit(const std::string& body, bool end_stream) {
    bodies_.push_back(body);
    std::string* held = &bodies_.back();
    static const std::pair<std::string, std::string> kHeaders[] = {
        {":method", "POST"},
        {":scheme", "http"},
        {":authority", "router"},
        {":path", "/llm.v1.Generation/Generate"},
        {"content-type", "application/grpc"},
        {"te", "trailers"}};
    std::vector<nghttp2_nv> nva;
    for (const auto& [n, v] : kHeaders) {
      nva.push_back({reinterpret_cast<uint8_t*>(const_cast<char*>(n.data())),
                     reinterpret_cast<uint8_t*>(const_cast<char*>(v.data())), n.size(), v.size(),
                     NGHTTP2_NV_FLAG_NONE});
    }
    nghttp2_data_provider prd;
    prd.source.ptr = new BodySource{held, 0, end_stream};
    prd.read_callback = [](nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags,
                           nghttp2_data_source* source, void*) -> ssize_t {
      auto* b = static_cast<BodySource*>(source->ptr);
      const size_t n = std::min(length, b->body->size() - b->offset);
      if (n == 0 && !b->end) return NGHTTP2_ERR_DEFERRED;  // an open request (leaks b: a test)
      std::memcpy(buf, b->body->data() + b->offset, n);
      b->offset += n;
      if (b->offset == b->body->size() && b->end) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        delete b;
      }
      return static_cast<ssize_t>(n);
    };
    const int32_t id =
        nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(), &prd, nullptr);
    streams_[id];
    return id;
  }
  int32_t next_stream_id() const { return nghttp2_session_get_next_stream_id(session_); }
  void Cancel(int32_t id) {
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
  }
  // Writes what the session has queued, then `raw` as it is.
  void Flush(const std::string& raw = "") {
    for (;;) {
      const uint8_t* data;
      const ssize_t n = nghttp2_session_mem_send(session_, &data);
      ASSERT_GE(n, 0);
      if (n == 0) break;
      WriteAll(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    WriteAll(raw.data(), raw.size());
  }
  // Reads and answers until `done` or the timeout; false on timeout or connection loss.
  bool PumpUntil(const std::function<bool()>& done, std::chrono::seconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
      if (eof_ || std::chrono::steady_clock::now() > end) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char buf[65536];
      const ssize_t n = ::read(fd_, buf, sizeof(buf));
      if (n <= 0) {
        eof_ = true;
        continue;
      }
      if (nghttp2_session_mem_recv(session_, reinterpret_cast<uint8_t*>(buf),
                                   static_cast<size_t>(n)) < 0) {
        eof_ = true;
        continue;
      }
      Flush();
    }
    return true;
  }
  const std::map<int32_t, Stream>& streams() const { return streams_; }
  std::optional<uint32_t> goaway_code() const { return goaway_code_; }
  bool eof() const { return eof_; }

 private:
  struct BodySource {
    const std::string* body;
    size_t offset;
    bool end;
  };
  void WriteAll(const char* data, size_t n) {
    while (n > 0) {
      const ssize_t w = ::send(fd_, data, n, MSG_NOSIGNAL);
      if (w <= 0) {
        eof_ = true;
        return;
      }
      data += w;
      n -= static_cast<size_t>(w);
    }
  }

  int fd_;
  nghttp2_session* session_ = nullptr;
  std::map<int32_t, Stream> streams_;
  std::deque<std::string> bodies_;
  std::optional<uint32_t> goaway_code_;
  bool eof_ = false;
};

class IdleFramesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeBehaviour hold;  // one message, then the stream stays open until cancelled
    hold.messages = 1;
    hold.hold = true;
    worker_ = FakeWorker::Start(hold);
    RouterConfig c;
    c.listen = "127.0.0.1:0";
    c.metrics_listen = "";
    c.workers = {worker_->address()};
    c.threads = 1;
    router_ = std::make_unique<RouterServer>(c);
    ASSERT_TRUE(router_->Start().ok());
    ASSERT_TRUE(llm::testing::WaitFor(
        [&] {
          const auto views = router_->pool().Snapshot();
          return !views.empty() && views[0].healthy;
        },
        std::chrono::milliseconds(5000)))
        << "the worker did not become healthy";
  }

  std::unique_ptr<FakeWorker> worker_;
  std::unique_ptr<RouterServer> router_;
};

TEST_F(IdleFramesTest, FramesForStreamsNeverOpenedDoNotHurtLiveStreams) {
  RawH2Client client(router_->port());
  std::vector<int32_t> live;
  for (int i = 0; i < 100; ++i) live.push_back(client.Generate());
  client.Flush();
  // Among them: 1,000 calls cancelled at once, half of them the grpcio way (a reset for the
  // stream id before its HEADERS; the router then resets the stream itself), half properly
  // (HEADERS, then RST_STREAM). And resets, window updates and DATA for ids never opened.
  std::vector<int32_t> reset_first, cancelled;
  for (int i = 0; i < 1000; ++i) {
    if (i % 2 == 0) {
      const int32_t id = client.next_stream_id();
      client.Flush(Rst(id));
      reset_first.push_back(client.Generate());
      ASSERT_EQ(reset_first.back(), id);
    } else {
      cancelled.push_back(client.Generate());
      client.Flush();
      client.Cancel(cancelled.back());
    }
    if (i % 100 == 0) {
      const int32_t far = client.next_stream_id() + 20000;
      client.Flush(Rst(far) + WindowUpdate(far + 2) + Data(far + 4) + Rst(far + 1));
    }
  }
  client.Flush();
  const auto settled = [&] {
    for (const int32_t id : live) {
      if (client.streams().at(id).data_bytes == 0) return false;
    }
    for (const int32_t id : reset_first) {
      if (!client.streams().at(id).closed) return false;
    }
    return worker_->open_calls() == static_cast<int64_t>(live.size());
  };
  ASSERT_TRUE(client.PumpUntil(settled, std::chrono::seconds(30)))
      << "connection lost: " << client.eof() << "; calls open at the worker "
      << worker_->open_calls();
  // The live streams are untouched: open, answered, and the connection had no GOAWAY.
  EXPECT_FALSE(client.goaway_code().has_value());
  for (const int32_t id : live) EXPECT_FALSE(client.streams().at(id).closed) << "stream " << id;
  for (const int32_t id : reset_first) {
    EXPECT_EQ(client.streams().at(id).error_code, static_cast<uint32_t>(NGHTTP2_CANCEL))
        << "stream " << id;
  }
  // The connection still takes calls that run to the end.
  FakeBehaviour quick;
  quick.messages = 3;
  worker_->SetBehaviour(quick);
  const int32_t after = client.Generate();
  client.Flush();
  ASSERT_TRUE(client.PumpUntil([&] { return client.streams().at(after).closed; },
                               std::chrono::seconds(10)));
  EXPECT_EQ(client.streams().at(after).error_code, 0u);
  EXPECT_EQ(client.streams().at(after).grpc_status, "0");
  // Cancelling the live streams reaches the worker.
  for (const int32_t id : live) client.Cancel(id);
  client.Flush();
  ASSERT_TRUE(
      client.PumpUntil([&] { return worker_->open_calls() == 0; }, std::chrono::seconds(10)))
      << worker_->open_calls() << " calls still open at the worker";
}

TEST_F(IdleFramesTest, AFloodOfSuchFramesEndsTheConnectionCalmly) {
  RawH2Client client(router_->port());
  const int32_t live = client.Generate();
  client.Flush();
  std::string flood;
  for (int i = 0; i < 10001; ++i) flood += Rst(100001 + 2 * i);
  client.Flush(flood);
  ASSERT_TRUE(
      client.PumpUntil([&] { return client.goaway_code().has_value(); }, std::chrono::seconds(10)));
  EXPECT_EQ(*client.goaway_code(), static_cast<uint32_t>(NGHTTP2_ENHANCE_YOUR_CALM));
  (void)live;
}

// A call answered early with its final status (a request over proxy.max_message_bytes) whose
// client never half-closes: the router resets the stream (RST_STREAM NO_ERROR, RFC 9113 8.1)
// after the status, and the call leaves the in-flight count at once, so a drain does not wait
// out its grace period for it (it waited the whole grace, 12 s at a 10 s grace).
TEST(EarlyStatusTest, AnAnsweredCallWhoseClientKeepsSendingNeitherHangsNorHoldsTheDrain) {
  auto worker = FakeWorker::Start(FakeBehaviour{});
  RouterConfig c;
  c.listen = "127.0.0.1:0";
  c.metrics_listen = "";
  c.workers = {worker->address()};
  c.threads = 1;
  c.proxy.max_message_bytes = 1024;
  c.drain_grace_seconds = 10;
  RouterServer router(c);
  ASSERT_TRUE(router.Start().ok());
  RawH2Client client(router.port());
  std::string body(5, '\0');
  body[3] = 0x10;  // a 4 KiB message, over the limit, of which 2 KiB are sent
  body += std::string(2048, 'x');
  const int32_t id = client.Submit(body, /*end_stream=*/false);
  client.Flush();
  ASSERT_TRUE(
      client.PumpUntil([&] { return client.streams().at(id).closed; }, std::chrono::seconds(10)))
      << "the stream was never closed";
  EXPECT_EQ(client.streams().at(id).grpc_status, "3");
  EXPECT_EQ(client.streams().at(id).error_code, uint32_t{NGHTTP2_NO_ERROR});
  const auto start = std::chrono::steady_clock::now();
  router.BeginDrain();
  EXPECT_TRUE(router.FinishDrain()) << "a call was left in flight";
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
}

}  // namespace
}  // namespace llm::router
