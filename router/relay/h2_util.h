// Small nghttp2 helpers shared by the relay's two sides (internal to router/relay).
#ifndef LLM_ROUTER_RELAY_H2_UTIL_H_
#define LLM_ROUTER_RELAY_H2_UTIL_H_

#include <nghttp2/nghttp2.h>

#include <cstdint>
#include <string>

namespace llm::router::relay {

// A header for nghttp2_submit_*: points into `name` and `value`, which must outlive the call.
inline nghttp2_nv Nv(const std::string& name, const std::string& value) {
  return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(),
                    value.size(), NGHTTP2_NV_FLAG_NONE};
}

// The callbacks a session of the relay uses (null ones are left unset).
struct SessionCallbacks {
  nghttp2_on_begin_headers_callback begin_headers = nullptr;
  nghttp2_on_header_callback header = nullptr;
  nghttp2_on_frame_recv_callback frame_recv = nullptr;
  nghttp2_on_data_chunk_recv_callback data_chunk = nullptr;
  nghttp2_on_stream_close_callback stream_close = nullptr;
  nghttp2_on_frame_send_callback frame_send = nullptr;
};

// A new nghttp2_session_callbacks holding `c`; the caller keeps it for the process's life.
inline nghttp2_session_callbacks* MakeCallbacks(const SessionCallbacks& c) {
  nghttp2_session_callbacks* cbs;
  nghttp2_session_callbacks_new(&cbs);
  if (c.begin_headers)
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, c.begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cbs, c.header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, c.frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, c.data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, c.stream_close);
  if (c.frame_send) nghttp2_session_callbacks_set_on_frame_send_callback(cbs, c.frame_send);
  return cbs;
}

}  // namespace llm::router::relay

#endif  // LLM_ROUTER_RELAY_H2_UTIL_H_
