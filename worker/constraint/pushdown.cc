#include "worker/constraint/pushdown.h"

#include <algorithm>
#include <span>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "worker/constraint/byte_regex.h"

namespace llm::constraint {
namespace {

constexpr uint8_t kCallOpen = 0xFD, kCallClose = 0xFC;
// Stacks one closure may reach (calls entered and returns taken before a byte): above a
// stack's depth, so a closure that returns through every frame fits.
constexpr size_t kMaxClosure = 8192;

}  // namespace

std::string CallMarker(int32_t rule) {
  return absl::StrCat(std::string(1, static_cast<char>(kCallOpen)), rule,
                      std::string(1, static_cast<char>(kCallClose)));
}

namespace {

// Calls `f(rule, begin, end)` for each call marker in `pattern`, [begin, end) its bytes.
template <typename F>
void ForEachCall(std::string_view pattern, F f) {
  for (size_t open = pattern.find(static_cast<char>(kCallOpen)); open != std::string_view::npos;
       open = pattern.find(static_cast<char>(kCallOpen), open + 1)) {
    const size_t close = pattern.find(static_cast<char>(kCallClose), open);
    if (close == std::string_view::npos) return;
    int32_t rule = 0;
    if (absl::SimpleAtoi(std::string(pattern.substr(open + 1, close - open - 1)), &rule)) {
      f(rule, open, close + 1);
    }
  }
}

}  // namespace

std::vector<int32_t> CallsIn(std::string_view pattern) {
  std::vector<int32_t> out;
  ForEachCall(pattern, [&](int32_t rule, size_t, size_t) { out.push_back(rule); });
  return out;
}

std::string RenumberCalls(std::string_view pattern, std::span<const int32_t> to) {
  std::string out;
  out.reserve(pattern.size());
  size_t done = 0;
  ForEachCall(pattern, [&](int32_t rule, size_t begin, size_t end) {
    if (rule < 0 || static_cast<size_t>(rule) >= to.size()) return;
    out.append(pattern.substr(done, begin - done));
    out += CallMarker(to[static_cast<size_t>(rule)]);
    done = end;
  });
  out.append(pattern.substr(done));
  return out;
}

RulePatterns DropUncalledRules(RulePatterns rules) {
  const size_t n = rules.patterns.size();
  std::vector<int32_t> to(n, -1);
  std::vector<size_t> order = {0};
  to[0] = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    for (int32_t k : CallsIn(rules.patterns[order[i]])) {
      if (k < 0 || static_cast<size_t>(k) >= n || to[static_cast<size_t>(k)] >= 0) continue;
      to[static_cast<size_t>(k)] = static_cast<int32_t>(order.size());
      order.push_back(static_cast<size_t>(k));
    }
  }
  RulePatterns out;
  for (size_t r : order) {
    out.names.push_back(rules.names[r]);
    out.patterns.push_back(RenumberCalls(rules.patterns[r], to));
  }
  out.calls = out.patterns.size() > 1 || !CallsIn(out.patterns[0]).empty();
  return out;
}

// Stacks as nodes that share their lower frames: a node is a frame and the node below it (-1:
// the floor, below which lies either nothing (`floor_is_end`) or a context the walk does not
// know). One per walk; nodes are only added. A frame is kept only where it fits: its depth
// plus the frames its rule still needs to end (Pushdown::need_) within `max_depth`, so a
// stack at the limit can always still close; unless `deep_is_error` (CheckRules, before
// need_ exists): then calls are entered however deep, and deep() says one went past.
class Pushdown::Arena {
 public:
  Arena(const Pushdown& p, bool floor_is_end, size_t max_depth = kMaxDepth,
        bool deep_is_error = false)
      : p_(p), floor_is_end_(floor_is_end), max_depth_(max_depth), deep_is_error_(deep_is_error) {}

  struct Node {
    Frame f;
    int32_t below;
    uint32_t depth;
  };
  const Node& node(int32_t n) const { return nodes_[static_cast<size_t>(n)]; }
  const Pushdown& p() const { return p_; }
  bool overflow() const { return overflow_; }
  bool deep() const { return deep_; }
  void ClearOverflow() { overflow_ = false; }

  int32_t Push(Frame f, int32_t below) {
    const uint32_t depth = below < 0 ? 1 : node(below).depth + 1;
    nodes_.push_back({f, below, depth});
    return static_cast<int32_t>(nodes_.size() - 1);
  }
  int32_t Import(const Stack& s) {
    int32_t n = -1;
    for (const Frame& f : s) n = Push(f, n);
    return n;
  }
  Stack Export(int32_t n) const {
    Stack s;
    for (; n >= 0; n = node(n).below) s.push_back(node(n).f);
    std::reverse(s.begin(), s.end());
    return s;
  }
  // The same frames all the way down.
  bool Same(int32_t a, int32_t b) const {
    for (; a != b; a = node(a).below, b = node(b).below) {
      if (a < 0 || b < 0 || node(a).f != node(b).f) return false;
    }
    return true;
  }

  // Appends to `ready` (unless there already) every stack reachable from `n` without a byte:
  // calls entered, returns taken. Sets `escaped` where a return below the floor may follow.
  void Close(int32_t n, std::vector<int32_t>& ready, bool& escaped) {
    todo_.assign(1, n);
    while (!todo_.empty() && !overflow_ && !(deep_ && deep_is_error_)) {
      const int32_t x = todo_.back();
      todo_.pop_back();
      if (std::any_of(ready.begin(), ready.end(), [&](int32_t r) { return Same(r, x); })) continue;
      if (ready.size() >= kMaxClosure) overflow_ = true;
      ready.push_back(x);
      const Node at = node(x);
      for (const Call& c : p_.CallsAt(at.f)) {
        const bool tail = p_.IsTail(at.f, c);
        if (deep_is_error_) {
          deep_ = deep_ || at.depth + 1 > max_depth_;
        } else if (!Fits({c.rule, 0}, tail ? at.depth : at.depth + 1) ||
                   (!tail && !Fits({at.f.rule, c.ret}, at.depth))) {
          continue;
        }
        const int32_t below = tail ? at.below : Push({at.f.rule, c.ret}, at.below);
        todo_.push_back(Push({c.rule, 0}, below));
      }
      if (!p_.dfas_[static_cast<size_t>(at.f.rule)].accepting(at.f.state)) continue;
      if (at.below >= 0) {
        todo_.push_back(at.below);
      } else if (!floor_is_end_) {
        escaped = true;
      }
    }
  }

  // Appends to `out` the stacks after `byte` from `from` (each closed first).
  void Step(std::span<const int32_t> from, uint8_t byte, std::vector<int32_t>& out, bool& escaped) {
    ready_.clear();
    for (int32_t n : from) Close(n, ready_, escaped);
    if (byte == kCallOpen || byte == kCallClose) return;
    for (int32_t r : ready_) {
      const Node at = node(r);
      const int32_t next = p_.dfas_[static_cast<size_t>(at.f.rule)].Next(at.f.state, byte);
      if (next == ByteDfa::kDead || !Fits({at.f.rule, next}, at.depth)) continue;
      const int32_t m = Push({at.f.rule, next}, at.below);
      if (std::any_of(out.begin(), out.end(), [&](int32_t o) { return Same(o, m); })) continue;
      out.push_back(m);
      if (out.size() > kMaxStacks) overflow_ = true;
    }
  }

  // Some stack reachable from `from` without a byte is the root's, complete.
  bool Complete(std::span<const int32_t> from) {
    ready_.clear();
    bool escaped = false;
    for (int32_t n : from) Close(n, ready_, escaped);
    return std::any_of(ready_.begin(), ready_.end(), [&](int32_t r) {
      return node(r).below < 0 &&
             p_.dfas_[static_cast<size_t>(node(r).f.rule)].accepting(node(r).f.state);
    });
  }

 private:
  bool Fits(Frame f, uint32_t depth) const {
    return deep_is_error_ || depth + p_.Need(f) <= max_depth_;
  }

  const Pushdown& p_;
  const bool floor_is_end_;
  const size_t max_depth_;
  const bool deep_is_error_;
  bool deep_ = false;
  std::vector<Node> nodes_;
  std::vector<int32_t> todo_, ready_;
  bool overflow_ = false;
};

void Pushdown::ComputeNeeds() {
  // Each state's distinct next states by a byte (not a marker's).
  std::vector<std::vector<std::vector<int32_t>>> next(dfas_.size());
  need_.resize(dfas_.size());
  for (size_t r = 0; r < dfas_.size(); ++r) {
    const ByteDfa& d = dfas_[r];
    next[r].resize(d.num_states());
    need_[r].assign(d.num_states(), kNever);
    for (int32_t s = 0; s < static_cast<int32_t>(d.num_states()); ++s) {
      if (d.accepting(s)) need_[r][static_cast<size_t>(s)] = 0;
      auto& out = next[r][static_cast<size_t>(s)];
      for (int b = 0; b < 256; ++b) {
        const int32_t t = d.Next(s, static_cast<uint8_t>(b));
        if (b == kCallOpen || b == kCallClose || t == ByteDfa::kDead) continue;
        if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
      }
    }
  }
  // The fewest frames above a state's own that ending its rule needs: along a path to
  // acceptance, the deepest of its calls (one more than the callee's own need; a tail call
  // replaces the frame). Relaxed to the fixed point (values only fall).
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < dfas_.size(); ++r) {
      for (size_t s = 0; s < need_[r].size(); ++s) {
        uint32_t v = need_[r][s];
        for (int32_t t : next[r][s]) v = std::min(v, need_[r][static_cast<size_t>(t)]);
        for (const Call& c : calls_[r][s]) {
          const uint32_t callee = need_[static_cast<size_t>(c.rule)][0];
          if (callee == kNever) continue;
          const Frame f{static_cast<int32_t>(r), static_cast<int32_t>(s)};
          v = std::min(v, IsTail(f, c)
                              ? callee
                              : std::max(callee + 1, need_[r][static_cast<size_t>(c.ret)]));
        }
        if (v < need_[r][s]) {
          need_[r][s] = v;
          changed = true;
        }
      }
    }
  }
  max_need_ = 0;
  for (const auto& rule : need_) {
    for (uint32_t v : rule) max_need_ = v == kNever ? max_need_ : std::max(max_need_, v);
  }
}

bool Pushdown::NearLimit(size_t depth, int max_token_bytes) const {
  const size_t reach = (static_cast<size_t>(max_token_bytes) + 1) * max_entry_ + max_need_ + 1;
  return depth + reach >= kMaxDepth;
}

bool Pushdown::IsTail(Frame f, const Call& c) const {
  const ByteDfa& d = dfas_[static_cast<size_t>(f.rule)];
  return d.accepting(c.ret) && !d.has_exits(c.ret);
}

size_t Pushdown::num_states() const {
  size_t n = 0;
  for (const ByteDfa& d : dfas_) n += d.num_states();
  return n;
}

size_t Pushdown::bytes() const {
  return num_states() * (256 * sizeof(int32_t) + sizeof(uint64_t) + sizeof(std::vector<Call>));
}

StackSet Pushdown::Walk(const StackSet& from, std::string_view bytes) const {
  Arena a(*this, /*floor_is_end=*/true);
  std::vector<int32_t> cur, next;
  for (const Stack& s : from) cur.push_back(a.Import(s));
  for (char ch : bytes) {
    next.clear();
    bool escaped = false;
    a.Step(cur, static_cast<uint8_t>(ch), next, escaped);
    if (a.overflow() || next.empty()) return {};
    cur.swap(next);
  }
  StackSet out;
  for (int32_t n : cur) out.push_back(a.Export(n));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool Pushdown::Complete(const StackSet& set) const {
  Arena a(*this, /*floor_is_end=*/true);
  std::vector<int32_t> from;
  for (const Stack& s : set) from.push_back(a.Import(s));
  return a.Complete(from);
}

// A walk of the vocabulary's trie with sets of stacks: a config (an index) is the stacks the
// bytes so far may have reached.
class Pushdown::Walker {
 public:
  Walker(const Pushdown& p, bool floor_is_end) : a_(p, floor_is_end) {}

  // TokenTable::MaskByClass's `uniform` of config `c`: where one stack's top takes the bytes
  // of a class alike.
  // The classes every stack reachable without a byte (calls entered, returns taken) takes
  // alike; computed once per config.
  uint64_t Uniform(int32_t c) {
    Config& at = configs_[static_cast<size_t>(c)];
    if (at.uniform != kUnknown) return at.uniform;
    ready_.clear();
    bool returned = false;
    for (uint32_t i = at.first; i < at.first + at.count; ++i) a_.Close(pool_[i], ready_, returned);
    uint64_t bits = a_.overflow() ? 0 : ~uint64_t{0};
    for (int32_t r : ready_) {
      const Frame f = a_.node(r).f;
      bits &= a_.p().uniform_[static_cast<size_t>(f.rule)][static_cast<size_t>(f.state)];
    }
    a_.ClearOverflow();
    return at.uniform = bits;
  }

  // The config of `stacks`.
  int32_t Root(std::span<const Stack> stacks) {
    configs_.push_back(
        {static_cast<uint32_t>(pool_.size()), static_cast<uint32_t>(stacks.size()), kUnknown});
    for (const Stack& s : stacks) pool_.push_back(a_.Import(s));
    return static_cast<int32_t>(configs_.size() - 1);
  }
  // The config after `byte` from `c`; -1 when no stack takes it. Sets `returned` when a return
  // below the floor may take it; `overflow` when a limit was passed.
  int32_t Step(int32_t c, uint8_t byte, bool& returned, bool& overflow) {
    const Config from = configs_[static_cast<size_t>(c)];
    out_.clear();
    a_.Step(std::span<const int32_t>(pool_.data() + from.first, from.count), byte, out_, returned);
    if (a_.overflow()) {
      a_.ClearOverflow();
      overflow = true;
      return -1;
    }
    if (out_.empty()) return -1;
    configs_.push_back(
        {static_cast<uint32_t>(pool_.size()), static_cast<uint32_t>(out_.size()), kUnknown});
    pool_.insert(pool_.end(), out_.begin(), out_.end());
    return static_cast<int32_t>(configs_.size() - 1);
  }

 private:
  static constexpr uint64_t kUnknown = ~uint64_t{0};
  struct Config {
    uint32_t first, count;
    uint64_t uniform = kUnknown;
  };
  Arena a_;
  std::vector<Config> configs_;
  std::vector<int32_t> pool_;
  std::vector<int32_t> out_, ready_;
};

namespace {

void SetBit(std::span<uint64_t> words, int32_t t) {
  words[static_cast<uint32_t>(t) / 64] |= uint64_t{1} << (static_cast<uint32_t>(t) % 64);
}

}  // namespace

FrameMask Pushdown::FrameMaskOf(const Stack& top, bool whole, const TokenTable& tokens) const {
  Walker w(*this, whole);
  FrameMask m;
  m.words.assign(static_cast<size_t>((tokens.vocab_size() + 63) / 64), 0);
  const auto step = [&](int32_t c, uint8_t b, uint32_t node) {
    bool returned = false;
    const int32_t next = w.Step(c, b, returned, m.overflow);
    if (returned && (node & TokenTable::kClassNode) != 0) {
      // A class node: the frames below take its bytes as they take each byte node's.
      const std::span<const uint32_t> members = tokens.ClassMembers(node);
      m.returns.insert(m.returns.end(), members.begin(), members.end());
    } else if (returned) {
      m.returns.push_back(node);
    }
    return next;
  };
  tokens.MaskByClass(
      w.Root({&top, 1}), step, [&](int32_t c) { return w.Uniform(c); }, m.words);
  if (m.overflow) m.returns.clear();  // the whole stack decides each use
  return m;
}

void Pushdown::MaskAt(const Stack& stack, const FrameMask& top, const TokenTable& tokens,
                      std::span<uint64_t> words) const {
  if (top.overflow) {
    WholeMaskAt({stack}, tokens, words);
    return;
  }
  for (size_t i = 0; i < words.size(); ++i) words[i] |= top.words[i];
  if (top.returns.empty()) return;
  // The top frames have returned: the frame below them takes the bytes from here.
  Walker w(*this, /*floor_is_end=*/true);
  bool returned = false, overflow = false;
  const auto step = [&](int32_t c, uint8_t b, uint32_t) {
    return w.Step(c, b, returned, overflow);
  };
  const Stack below(stack.begin(), stack.end() - static_cast<std::ptrdiff_t>(kMaskFrames));
  const int32_t from = w.Root({&below, 1});
  for (uint32_t node : top.returns) {
    tokens.ForEachAcceptedUnder(node, from, step, [&](int32_t t) { SetBit(words, t); });
  }
}

void Pushdown::WholeMaskAt(const StackSet& set, const TokenTable& tokens,
                           std::span<uint64_t> words) const {
  Walker w(*this, /*floor_is_end=*/true);
  bool returned = false, overflow = false;
  const auto step = [&](int32_t c, uint8_t b, uint32_t) {
    return w.Step(c, b, returned, overflow);
  };
  tokens.MaskByClass(
      w.Root(set), step, [&](int32_t c) { return w.Uniform(c); }, words);
}

absl::StatusOr<Pushdown> Pushdown::Build(const RulePatterns& rules, size_t max_states,
                                         std::string_view field) {
  Pushdown p;
  p.names_ = rules.names;
  size_t states = 0;
  for (size_t k = 0; k < rules.patterns.size(); ++k) {
    const std::string where = absl::StrCat(std::string(field), ": rule '", rules.names[k], "'");
    for (int32_t callee : CallsIn(rules.patterns[k])) {
      if (callee < 0 || static_cast<size_t>(callee) >= rules.patterns.size()) {
        return absl::InternalError(
            absl::StrCat(where, " calls rule ", callee, " of ", rules.patterns.size()));
      }
    }
    auto nfa = ParseRegex(rules.patterns[k], where, /*extensions=*/true);
    if (!nfa.ok()) return nfa.status();
    if (states >= max_states) {
      return absl::InvalidArgumentError(absl::StrCat(std::string(field),
                                                     ": the grammar's rules need more than ",
                                                     max_states, " automaton states"));
    }
    auto dfa = ByteDfa::Build(*nfa, max_states - states, where);
    if (!dfa.ok()) return dfa.status();
    states += dfa->num_states();
    p.dfas_.push_back(*std::move(dfa));
  }
  // A state's calls: where the bytes of a rule's marker lead.
  const auto n = static_cast<int32_t>(p.dfas_.size());
  p.calls_.resize(p.dfas_.size());
  for (int32_t r = 0; r < n; ++r) {
    const ByteDfa& d = p.dfas_[static_cast<size_t>(r)];
    auto& calls = p.calls_[static_cast<size_t>(r)];
    calls.resize(d.num_states());
    for (int32_t s = 0; s < static_cast<int32_t>(d.num_states()); ++s) {
      if (d.Next(s, kCallOpen) == ByteDfa::kDead) continue;
      for (int32_t k = 0; k < n; ++k) {
        const int32_t ret = d.Walk(s, CallMarker(k));
        if (ret != ByteDfa::kDead) calls[static_cast<size_t>(s)].push_back({k, ret});
      }
    }
  }
  if (absl::Status st = p.CheckRules(field); !st.ok()) return st;
  p.ComputeNeeds();
  p.uniform_.resize(p.dfas_.size());
  for (size_t r = 0; r < p.dfas_.size(); ++r) {
    const ByteDfa& d = p.dfas_[r];
    for (int32_t s = 0; s < static_cast<int32_t>(d.num_states()); ++s) {
      p.uniform_[r].push_back(TokenTable::UniformClasses([&](uint8_t b) { return d.Next(s, b); }));
    }
  }
  return p;
}

absl::Status Pushdown::CheckRules(std::string_view field) {
  // A rule ends when some path of its automaton reaches acceptance through bytes and calls of
  // rules that end; what is left after the fixed point never ends.
  std::vector<uint8_t> ends(dfas_.size(), 0);
  const auto can_end = [&](size_t r) {
    const ByteDfa& d = dfas_[r];
    std::vector<uint8_t> seen(d.num_states(), 0);
    std::vector<int32_t> todo = {0};
    seen[0] = 1;
    while (!todo.empty()) {
      const int32_t s = todo.back();
      todo.pop_back();
      if (d.accepting(s)) return true;
      const auto visit = [&](int32_t t) {
        if (t != ByteDfa::kDead && !seen[static_cast<size_t>(t)]) {
          seen[static_cast<size_t>(t)] = 1;
          todo.push_back(t);
        }
      };
      for (int b = 0; b < 256; ++b) {
        if (b != kCallOpen) visit(d.Next(s, static_cast<uint8_t>(b)));
      }
      for (const Call& c : calls_[r][static_cast<size_t>(s)]) {
        if (ends[static_cast<size_t>(c.rule)]) visit(c.ret);
      }
    }
    return false;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < dfas_.size(); ++r) {
      if (ends[r] || !can_end(r)) continue;
      ends[r] = 1;
      changed = true;
    }
  }
  // Named: a rule the root calls before the root (the root never ends because it does not).
  for (size_t i = 1; i <= dfas_.size(); ++i) {
    const size_t r = i % dfas_.size();
    if (ends[r]) continue;
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(field), ": rule '", names_[r],
                     "' never ends (each of its expansions refers to a rule that never ends)"));
  }
  // Without left recursion, the calls entered before a byte name distinct rules.
  for (size_t r = 0; r < dfas_.size(); ++r) {
    Arena a(*this, /*floor_is_end=*/true, dfas_.size() + 2, /*deep_is_error=*/true);
    std::vector<int32_t> ready;
    bool escaped = false;
    a.Close(a.Push({static_cast<int32_t>(r), 0}, -1), ready, escaped);
    if (!a.deep() && a.overflow()) {
      return absl::InvalidArgumentError(absl::StrCat(std::string(field), ": rule '", names_[r],
                                                     "' may begin with more than ", kMaxClosure,
                                                     " rules at once; simplify it"));
    }
    if (!a.deep()) {
      for (int32_t x : ready) max_entry_ = std::max<size_t>(max_entry_, a.node(x).depth);
      continue;
    }
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(field), ": rule '", names_[r],
                     "' may begin with itself (left recursion); write the repetition with "
                     "'*' or '+'"));
  }
  return absl::OkStatus();
}

}  // namespace llm::constraint
