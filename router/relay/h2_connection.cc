#include "router/relay/h2_connection.h"

#include <openssl/err.h>
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

std::string TlsError(SSL* ssl, int rc) {
  const int e = SSL_get_error(ssl, rc);
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code != 0) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof(buf));
    return buf;
  }
  if (e == SSL_ERROR_ZERO_RETURN) return "closed by peer";
  if (e == SSL_ERROR_SYSCALL) return "unexpected end of stream";
  return "error " + std::to_string(e);
}

}  // namespace

H2Connection::H2Connection(EventLoop* loop, int fd, SSL* ssl) : loop_(loop), fd_(fd), ssl_(ssl) {
  if (ssl_ != nullptr) {
    rbio_ = BIO_new(BIO_s_mem());
    wbio_ = BIO_new(BIO_s_mem());
    BIO_set_mem_eof_return(rbio_, -1);  // empty means "want more", not end of stream
    SSL_set_bio(ssl_, rbio_, wbio_);
  }
}

H2Connection::~H2Connection() {
  if (session_ != nullptr) nghttp2_session_del(session_);
  if (ssl_ != nullptr) SSL_free(ssl_);
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
  if (ssl_ == nullptr) return ToSession(data, n);
  BIO_write(rbio_, data, static_cast<int>(n));
  if (!handshake_done_) {
    const int rc = SSL_do_handshake(ssl_);
    if (rc != 1) {
      const int e = SSL_get_error(ssl_, rc);
      if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
        Close("TLS handshake failed: " + TlsError(ssl_, rc));
        return false;
      }
      Touch();  // the handshake's next flight
      return true;
    }
    handshake_done_ = true;
    const unsigned char* alpn = nullptr;
    unsigned int alpn_len = 0;
    SSL_get0_alpn_selected(ssl_, &alpn, &alpn_len);
    if (alpn_len != 0 && std::string_view(reinterpret_cast<const char*>(alpn), alpn_len) != "h2") {
      Close("TLS: the peer chose a protocol other than h2 (ALPN)");
      return false;
    }
  }
  uint8_t plain[kReadChunk];
  for (;;) {
    const int rc = SSL_read(ssl_, plain, sizeof(plain));
    if (rc > 0) {
      if (!ToSession(plain, static_cast<size_t>(rc))) return false;
      continue;
    }
    const int e = SSL_get_error(ssl_, rc);
    if (e == SSL_ERROR_WANT_READ) break;
    Close("TLS: " + TlsError(ssl_, rc));
    return false;
  }
  Touch();  // post-handshake messages, and the session's answers
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
  const size_t pending = BIO_ctrl_pending(wbio_);
  if (pending == 0) return;
  CompactOut();
  const size_t at = out_.size();
  out_.resize(at + pending);
  const int got = BIO_read(wbio_, out_.data() + at, static_cast<int>(pending));
  out_.resize(at + static_cast<size_t>(std::max(got, 0)));
}

void H2Connection::Flush() {
  if (closed_ || connecting_) return;
  if (ssl_ != nullptr && !handshake_done_) {
    // A client's first call writes its hello; a server's only moves what Receive produced.
    const int rc = SSL_do_handshake(ssl_);
    if (rc != 1) {
      const int e = SSL_get_error(ssl_, rc);
      if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
        Close("TLS handshake failed: " + TlsError(ssl_, rc));
        return;
      }
    }
  }
  for (;;) {
    // Gather frames while there is room (with TLS, once the handshake is done).
    while (out_.size() - out_offset_ < kMaxBuffered && (ssl_ == nullptr || handshake_done_) &&
           nghttp2_session_want_write(session_)) {
      const uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(session_, &data);
      if (n < 0) {
        Close(std::string("HTTP/2: ") + nghttp2_strerror(static_cast<int>(n)));
        return;
      }
      if (n == 0) break;
      if (ssl_ != nullptr) {
        if (SSL_write(ssl_, data, static_cast<int>(n)) <= 0) {
          Close("TLS: " + TlsError(ssl_, -1));
          return;
        }
        DrainTls();
        continue;
      }
      CompactOut();
      out_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    if (ssl_ != nullptr) DrainTls();
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
