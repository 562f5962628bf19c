#include "router/relay/h2_connection.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace llm::router::relay {

namespace {
constexpr size_t kReadChunk = 64 * 1024;
// Stop pulling frames from the session beyond this much unwritten output (a slow peer).
constexpr size_t kMaxBuffered = 256 * 1024;
}  // namespace

H2Connection::H2Connection(EventLoop* loop, int fd) : loop_(loop), fd_(fd) {}

H2Connection::~H2Connection() {
  if (session_ != nullptr) nghttp2_session_del(session_);
  if (fd_ >= 0) ::close(fd_);
}

void H2Connection::Start(nghttp2_session* session, bool connecting) {
  session_ = session;
  connecting_ = connecting;
  want_out_ = connecting;
  loop_->Add(fd_, EPOLLIN | EPOLLRDHUP | (connecting ? EPOLLOUT : 0u), this);
  Touch();
}

void H2Connection::Close(const std::string& why) {
  if (closed_) return;
  closed_ = true;
  loop_->Remove(fd_);
  ::shutdown(fd_, SHUT_RDWR);
  OnClose(why);
}

void H2Connection::OnEvents(uint32_t events) {
  if (closed_) return;
  if (connecting_ && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      Close(std::string("connect: ") + std::strerror(err));
      return;
    }
    connecting_ = false;
    OnConnected();
    if (closed_) return;
  }
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
    ReadAll();
    if (closed_) return;
  }
  if (events & EPOLLOUT)
    Flush();
  else
    Touch();  // answer what was just read (SETTINGS acks, window updates, ...)
}

void H2Connection::ReadAll() {
  char buf[kReadChunk];
  for (;;) {
    const ssize_t n = ::read(fd_, buf, sizeof(buf));
    if (n > 0) {
      last_read_ = Clock::now();
      const ssize_t used =
          nghttp2_session_mem_recv(session_, reinterpret_cast<const uint8_t*>(buf), n);
      if (used < 0) {
        Close(std::string("HTTP/2: ") + nghttp2_strerror(static_cast<int>(used)));
        return;
      }
      if (static_cast<size_t>(n) < sizeof(buf)) return;
      continue;
    }
    if (n == 0) {
      Close("connection closed by peer");
      return;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      Close(std::string("read: ") + std::strerror(errno));
    return;
  }
}

void H2Connection::Flush() {
  if (closed_ || connecting_) return;
  for (;;) {
    // Gather frames while there is room.
    while (out_.size() - out_offset_ < kMaxBuffered && nghttp2_session_want_write(session_)) {
      const uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(session_, &data);
      if (n < 0) {
        Close(std::string("HTTP/2: ") + nghttp2_strerror(static_cast<int>(n)));
        return;
      }
      if (n == 0) break;
      if (out_offset_ > 0 && out_offset_ == out_.size()) {
        out_.clear();
        out_offset_ = 0;
      }
      out_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    if (out_offset_ == out_.size()) break;
    const ssize_t w =
        ::send(fd_, out_.data() + out_offset_, out_.size() - out_offset_, MSG_NOSIGNAL);
    if (w > 0) {
      out_offset_ += static_cast<size_t>(w);
      if (out_offset_ == out_.size()) {
        out_.clear();
        out_offset_ = 0;
      }
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    Close(std::string("write: ") + std::strerror(errno));
    return;
  }
  UpdateInterest();
  if (!closed_ && !nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_) &&
      out_offset_ == out_.size()) {
    Close("session finished");
  }
}

void H2Connection::UpdateInterest() {
  const bool want = out_offset_ < out_.size();
  if (want == want_out_) return;
  want_out_ = want;
  loop_->Modify(fd_, EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0u), this);
}

}  // namespace llm::router::relay
