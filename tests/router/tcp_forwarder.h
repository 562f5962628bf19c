// A TCP forwarder for router tests: listens on 127.0.0.1:0 and relays bytes both ways to a
// target. It can stop relaying without closing anything (a peer that went silent, as a lost
// node looks) and stop accepting so that new connections hang in the handshake (a full accept
// queue drops SYNs).
#ifndef LLM_TESTS_ROUTER_TCP_FORWARDER_H_
#define LLM_TESTS_ROUTER_TCP_FORWARDER_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace llm::testing {

class TcpForwarder {
 public:
  explicit TcpForwarder(int target_port);
  ~TcpForwarder();
  TcpForwarder(const TcpForwarder&) = delete;
  TcpForwarder& operator=(const TcpForwarder&) = delete;

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // Stops moving bytes on every connection (nothing is closed; the peers see silence).
  void Freeze() { frozen_ = true; }
  // Stops accepting and fills the accept queue, so that later connects hang.
  void StopAccepting();

 private:
  void AcceptLoop();
  void Pump(int from, int to);

  const int target_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> frozen_{false};
  std::atomic<bool> accepting_{true};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<int> fds_;  // every socket, closed at the end
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

}  // namespace llm::testing

#endif  // LLM_TESTS_ROUTER_TCP_FORWARDER_H_
