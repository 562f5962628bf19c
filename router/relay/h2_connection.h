// One HTTP/2 connection of the relay: a non-blocking socket, an nghttp2 session, and an output
// buffer written at the end of each loop iteration (EventLoop::MarkDirty), so the frames of
// every stream on the connection leave in one write.
//
// With TLS, OpenSSL sits between the socket and the session on memory BIOs: bytes read from the
// socket go into the SSL object, what it decrypts goes to nghttp2; frames nghttp2 produces are
// encrypted into the same output buffer. The socket code is the same either way, and the
// session sees no byte before the handshake is done (and ALPN, when the peer used it, chose h2).
#ifndef LLM_ROUTER_RELAY_H2_CONNECTION_H_
#define LLM_ROUTER_RELAY_H2_CONNECTION_H_

#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>

#include <memory>
#include <string>

#include "router/relay/event_loop.h"
#include "router/relay/idle_frame_filter.h"
#include "router/relay/tls_pipe.h"

namespace llm::router::relay {

class H2Connection : public FdHandler {
 public:
  // `ssl` (owned; null for plaintext) is set up for its side (accept or connect state).
  H2Connection(EventLoop* loop, int fd, SSL* ssl = nullptr);
  ~H2Connection() override;
  H2Connection(const H2Connection&) = delete;
  H2Connection& operator=(const H2Connection&) = delete;

  nghttp2_session* session() const { return session_; }
  EventLoop* loop() const { return loop_; }
  bool closed() const { return closed_; }
  bool connecting() const { return connecting_; }
  // When bytes last arrived from the peer (the connection's start until then).
  Clock::time_point last_read() const { return last_read_; }
  // Frames were queued on the session: write them at the end of this iteration.
  void Touch() {
    if (!closed_) loop_->MarkDirty(this);
  }
  // Closes the socket; OnClose runs once (its streams fail), then the owner deletes it.
  void Close(const std::string& why);

  void OnEvents(uint32_t events) override;
  void Flush() override;
  // The relay is draining: a client connection refuses new streams (GOAWAY).
  virtual void StartDrain() {}

 protected:
  // Takes ownership of `session` and starts watching the socket (`connecting`: a client socket
  // whose connect() is in progress).
  void Start(nghttp2_session* session, bool connecting);
  virtual void OnClose(const std::string& why) = 0;
  virtual void OnConnected() {}
  // Server side: frames for streams the peer never opened are dropped before the session sees
  // them instead of ending the connection (IdleFrameFilter). Call before Start.
  void TolerateIdleStreamFrames() { filter_ = std::make_unique<IdleFrameFilter>(); }

 private:
  void ReadAll();
  // Hands `n` bytes read from the socket to the session (through TLS when on). False when the
  // connection was closed.
  bool Receive(const uint8_t* data, size_t n);
  bool ToSession(const uint8_t* data, size_t n);
  bool ToParser(const uint8_t* data, size_t n);
  // Moves what OpenSSL has written (handshake, records) into out_.
  void DrainTls();
  // Frees the part of out_ already written (all of it, or a large prefix).
  void CompactOut();
  void UpdateInterest();

  EventLoop* loop_;
  int fd_;
  nghttp2_session* session_ = nullptr;
  bool connecting_ = false;
  bool closed_ = false;
  bool want_out_ = false;  // EPOLLOUT registered
  Clock::time_point last_read_ = Clock::now();
  std::string out_;  // bytes not yet written
  size_t out_offset_ = 0;
  std::unique_ptr<TlsPipe> tls_;  // null: plaintext
  std::unique_ptr<IdleFrameFilter> filter_;
};

}  // namespace llm::router::relay

#endif  // LLM_ROUTER_RELAY_H2_CONNECTION_H_
