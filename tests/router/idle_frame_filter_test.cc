// IdleFrameFilter over hand-made frame bytes: which frames pass, byte for byte, whatever the
// split of the input; DATA credit, resets before open, and the abuse bound.
#include "router/relay/idle_frame_filter.h"

#include <string>

#include "gtest/gtest.h"

namespace llm::router::relay {
namespace {

constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

std::string Frame(uint8_t type, int32_t id, const std::string& payload, uint8_t flags = 0) {
  std::string f;
  const uint32_t n = static_cast<uint32_t>(payload.size());
  f.push_back(static_cast<char>(n >> 16));
  f.push_back(static_cast<char>(n >> 8));
  f.push_back(static_cast<char>(n));
  f.push_back(static_cast<char>(type));
  f.push_back(static_cast<char>(flags));
  f.push_back(static_cast<char>((id >> 24) & 0x7f));
  f.push_back(static_cast<char>(id >> 16));
  f.push_back(static_cast<char>(id >> 8));
  f.push_back(static_cast<char>(id));
  return f + payload;
}
std::string Headers(int32_t id) { return Frame(0x1, id, std::string(7, 'h'), 0x4); }
std::string Data(int32_t id, size_t n) { return Frame(0x0, id, std::string(n, 'd')); }
std::string Rst(int32_t id) { return Frame(0x3, id, std::string("\0\0\0\x8", 4)); }
std::string WindowUpdate(int32_t id) { return Frame(0x8, id, std::string("\0\0\x10\0", 4)); }
std::string Settings() { return Frame(0x4, 0, ""); }

struct Filtered {
  std::string passed;
  IdleFrameFilter::Outcome outcome;
};

// Feeds `in` in pieces of `piece` bytes.
Filtered Filter(const std::string& in, size_t piece, IdleFrameFilter::Limits limits = {}) {
  IdleFrameFilter f(limits);
  Filtered r;
  const auto now = IdleFrameFilter::Clock::now();
  for (size_t at = 0; at < in.size(); at += piece) {
    const std::string part = in.substr(at, piece);
    EXPECT_TRUE(f.Feed(
        reinterpret_cast<const uint8_t*>(part.data()), part.size(), now,
        [&](const uint8_t* p, size_t n) {
          r.passed.append(reinterpret_cast<const char*>(p), n);
          return true;
        },
        &r.outcome));
  }
  return r;
}

TEST(IdleFrameFilterTest, DropsResetsWindowUpdatesAndDataForStreamsNeverOpened) {
  const std::string preface(kPreface, 24);
  const std::string kept = preface + Settings() + Headers(1) + Data(1, 30) + Rst(1) +
                           WindowUpdate(0) + WindowUpdate(1) + Headers(5) + Data(3, 2);
  // Stream 3 was never opened by HEADERS but 5 was: 3 is closed, not idle, and passes.
  const std::string in = preface + Settings() + Rst(3) + Headers(1) + Data(1, 30) + Rst(1) +
                         Data(7, 100) + WindowUpdate(0) + WindowUpdate(9) + WindowUpdate(1) +
                         Rst(2) + Data(4, 5) + Headers(5) + Data(3, 2) + Rst(101);
  for (const size_t piece : {in.size(), size_t{1}, size_t{5}, size_t{9}, size_t{13}}) {
    SCOPED_TRACE(piece);
    const Filtered r = Filter(in, piece);
    EXPECT_EQ(r.passed, kept);
    EXPECT_EQ(r.outcome.dropped_data_bytes, 105u);  // stream 7's 100 and stream 4's 5
    EXPECT_TRUE(r.outcome.reset_before_open.empty());
    EXPECT_FALSE(r.outcome.abusive);
  }
}

TEST(IdleFrameFilterTest, AStreamResetBeforeItsHeadersIsReportedWhenItOpens) {
  const std::string in = std::string(kPreface, 24) + Rst(3) + Headers(1) + Headers(3) + Rst(9) +
                         Headers(5) + Headers(11);
  const Filtered r = Filter(in, 4);
  EXPECT_EQ(r.passed,
            std::string(kPreface, 24) + Headers(1) + Headers(3) + Headers(5) + Headers(11));
  EXPECT_EQ(r.outcome.reset_before_open, std::vector<int32_t>({3}));
}

TEST(IdleFrameFilterTest, TooManyDroppedFramesInTheWindowIsAbuse) {
  std::string in(kPreface, 24);
  for (int i = 0; i < 50; ++i) in += Rst(1001 + 2 * i);
  const Filtered calm = Filter(in, in.size(), {.max_dropped = 50});
  EXPECT_FALSE(calm.outcome.abusive);
  in += Rst(2001);
  const Filtered abuse = Filter(in, in.size(), {.max_dropped = 50});
  EXPECT_TRUE(abuse.outcome.abusive);
}

TEST(IdleFrameFilterTest, StopsWhenTheSessionSaysTheConnectionClosed) {
  IdleFrameFilter f;
  const std::string in = std::string(kPreface, 24) + Settings() + Headers(1);
  IdleFrameFilter::Outcome outcome;
  int calls = 0;
  EXPECT_FALSE(f.Feed(
      reinterpret_cast<const uint8_t*>(in.data()), in.size(), IdleFrameFilter::Clock::now(),
      [&](const uint8_t*, size_t) {
        ++calls;
        return false;
      },
      &outcome));
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace llm::router::relay
