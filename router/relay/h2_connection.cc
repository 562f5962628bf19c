#include "router/relay/h2_connection.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

namespace llm::router::relay {

namespace {

constexpr size_t kReadChunk = 64 * 1024;
// Stop pulling frames from the session beyond this much unwritten output (a slow peer).
constexpr size_t kMaxBuffered = 256 * 1024;

}  // namespace

H2Connection::H2Connection(EventLoop* loop, int fd, SSL* ssl) : loop_(loop), fd_(fd) {
  if (ssl != nullptr) tls_ = std::make_unique<TlsPipe>(ssl, "h2");
}

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
      if (!Receive(reinterpret_cast<const uint8_t*>(buf), static_cast<size_t>(n))) return;
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

bool H2Connection::ToSession(const uint8_t* data, size_t n) {
  if (filter_ == nullptr) return ToParser(data, n);
  IdleFrameFilter::Outcome dropped;
  if (!filter_->Feed(
          data, n, Clock::now(), [this](const uint8_t* p, size_t len) { return ToParser(p, len); },
          &dropped)) {
    return false;
  }
  if (dropped.abusive) {
    nghttp2_session_terminate_session(session_, NGHTTP2_ENHANCE_YOUR_CALM);
    Touch();
    return true;  // the GOAWAY goes out; the session then wants nothing more and closes
  }
  if (dropped.dropped_data_bytes > 0) {
    // The client counted those bytes against the connection window; give them back.
    nghttp2_submit_window_update(
        session_, NGHTTP2_FLAG_NONE, 0,
        static_cast<int32_t>(std::min<uint64_t>(dropped.dropped_data_bytes, (1u << 31) - 1)));
  }
  for (const int32_t id : dropped.reset_before_open) {
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
  }
  return !closed_;
}

bool H2Connection::ToParser(const uint8_t* data, size_t n) {
  const ssize_t used = nghttp2_session_mem_recv(session_, data, n);
  if (used < 0) {
    Close(std::string("HTTP/2: ") + nghttp2_strerror(static_cast<int>(used)));
    return false;
  }
  return !closed_;
}

bool H2Connection::Receive(const uint8_t* data, size_t n) {
  if (tls_ == nullptr) return ToSession(data, n);
  bool open = true;
  const absl::Status st = tls_->Receive(data, n, [&](const uint8_t* plain, size_t len) {
    open = ToSession(plain, len);
    return open;
  });
  if (!open) return false;
  if (!st.ok()) {
    Close(std::string(st.message()));
    return false;
  }
  Touch();  // the handshake's next flight, post-handshake messages, the session's answers
  return true;
}

void H2Connection::CompactOut() {
  if (out_offset_ == 0) return;
  if (out_offset_ == out_.size()) {
    out_.clear();
    out_offset_ = 0;
  } else if (out_offset_ >= kMaxBuffered) {
    // A peer that keeps the socket busy: drop the sent prefix rather than let it grow.
    out_.erase(0, out_offset_);
    out_offset_ = 0;
  }
}

void H2Connection::DrainTls() {
  CompactOut();
  tls_->Drain(&out_);
}

void H2Connection::Flush() {
  if (closed_ || connecting_) return;
  if (tls_ != nullptr && !tls_->handshake_done()) {
    // A client's first call writes its hello; a server's only moves what Receive produced.
    if (absl::Status st = tls_->Handshake(); !st.ok()) {
      Close(std::string(st.message()));
      return;
    }
  }
  for (;;) {
    // Gather frames while there is room (with TLS, once the handshake is done).
    while (out_.size() - out_offset_ < kMaxBuffered &&
           (tls_ == nullptr || tls_->handshake_done()) && nghttp2_session_want_write(session_)) {
      const uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(session_, &data);
      if (n < 0) {
        Close(std::string("HTTP/2: ") + nghttp2_strerror(static_cast<int>(n)));
        return;
      }
      if (n == 0) break;
      if (tls_ != nullptr) {
        if (absl::Status st = tls_->Encrypt(data, static_cast<size_t>(n)); !st.ok()) {
          Close(std::string(st.message()));
          return;
        }
        DrainTls();
        continue;
      }
      CompactOut();
      out_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    if (tls_ != nullptr) DrainTls();
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
