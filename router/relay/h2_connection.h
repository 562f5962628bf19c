// One HTTP/2 connection of the relay: a non-blocking socket, an nghttp2 session, and an output
// buffer written at the end of each loop iteration (EventLoop::MarkDirty), so the frames of
// every stream on the connection leave in one write.
#ifndef LLM_ROUTER_RELAY_H2_CONNECTION_H_
#define LLM_ROUTER_RELAY_H2_CONNECTION_H_

#include <nghttp2/nghttp2.h>

#include <string>

#include "router/relay/event_loop.h"

namespace llm::router::relay {

class H2Connection : public FdHandler {
 public:
  H2Connection(EventLoop* loop, int fd);
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

 private:
  void ReadAll();
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
};

}  // namespace llm::router::relay

#endif  // LLM_ROUTER_RELAY_H2_CONNECTION_H_
