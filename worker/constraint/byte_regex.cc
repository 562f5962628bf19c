#include "worker/constraint/byte_regex.h"

#include <algorithm>
#include <bitset>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"

namespace llm::constraint {
namespace {

// The parsed pattern: a tree, emitted into the NFA as often as counted repetitions need.
struct Node {
  enum Kind { kBytes, kClass, kConcat, kAlt, kRepeat, kLength, kJsonText, kEmpty } kind = kEmpty;
  std::string bytes;                        // kBytes: a literal sequence
  std::bitset<128> ascii;                   // kClass: ASCII members
  bool non_ascii = false;                   // kClass: also every non-ASCII character
  std::vector<std::unique_ptr<Node>> kids;  // kConcat, kAlt; kRepeat, kLength, kJsonText: one
  int32_t min = 0, max = -1;  // kRepeat: copies; kLength: characters; max -1: unbounded
};
using NodePtr = std::unique_ptr<Node>;

NodePtr MakeNode(Node::Kind kind) {
  auto n = std::make_unique<Node>();
  n->kind = kind;
  return n;
}

class Parser {
 public:
  Parser(std::string_view p, std::string_view field, bool extensions)
      : p_(p), field_(field), extensions_(extensions) {}

  absl::StatusOr<NodePtr> Parse() {
    if (!p_.empty() && p_[0] == '^') ++i_;
    auto n = Alternation();
    if (!n.ok()) return n;
    if (i_ < p_.size()) return Error("unexpected ')'");
    return n;
  }

 private:
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(std::string(field_), ": ", std::string(what),
                                                   " at offset ", i_, " of the pattern"));
  }
  bool AtEnd() const { return i_ >= p_.size(); }
  // A final `$` (the match is anchored anyway).
  bool AtFinalDollar() const { return i_ + 1 == p_.size() && p_[i_] == '$'; }

  absl::StatusOr<NodePtr> Alternation() {
    auto alt = MakeNode(Node::kAlt);
    for (;;) {
      auto c = Concatenation();
      if (!c.ok()) return c;
      alt->kids.push_back(*std::move(c));
      if (AtEnd() || p_[i_] != '|') break;
      ++i_;
    }
    if (alt->kids.size() == 1) return std::move(alt->kids[0]);
    return alt;
  }

  absl::StatusOr<NodePtr> Concatenation() {
    auto cat = MakeNode(Node::kConcat);
    while (!AtEnd() && p_[i_] != '|' && p_[i_] != ')') {
      if (AtFinalDollar()) {
        ++i_;
        break;
      }
      auto atom = Atom();
      if (!atom.ok()) return atom;
      auto q = Quantified(*std::move(atom));
      if (!q.ok()) return q;
      cat->kids.push_back(*std::move(q));
    }
    return cat;
  }

  absl::StatusOr<NodePtr> Quantified(NodePtr atom) {
    while (!AtEnd()) {
      int32_t min = 0, max = -1;
      const char c = p_[i_];
      if (c == '*') {
        ++i_;
      } else if (c == '+') {
        min = 1;
        ++i_;
      } else if (c == '?') {
        max = 1;
        ++i_;
      } else if (c == '{') {
        auto b = Braces(min, max);
        if (!b.ok()) return b.status();
        if (!*b) return atom;  // a literal '{'
      } else {
        return atom;
      }
      if (!AtEnd() && p_[i_] == '?') ++i_;  // lazy: the same language
      if (!AtEnd() && p_[i_] == '+') return Error("possessive quantifiers are not supported");
      if (!AtEnd() && (p_[i_] == '*' || p_[i_] == '+' || p_[i_] == '?' || p_[i_] == '{')) {
        size_t j = i_;
        int32_t a = 0, b = 0;
        // A brace that is not a quantifier is a literal; any other quantifier here repeats a
        // repetition (Python's "multiple repeat").
        if (p_[i_] != '{' || Braces(a, b).value_or(false)) {
          i_ = j;
          return Error("multiple repeat (a quantifier after a quantifier)");
        }
        i_ = j;
      }
      auto r = MakeNode(Node::kRepeat);
      r->min = min;
      r->max = max;
      r->kids.push_back(std::move(atom));
      atom = std::move(r);
    }
    return atom;
  }

  // {n}, {n,}, {n,m}; false (nothing consumed) when the brace does not start a quantifier.
  absl::StatusOr<bool> Braces(int32_t& min, int32_t& max) {
    size_t j = i_ + 1;
    auto number = [&](int32_t& out) {
      const size_t from = j;
      int64_t v = 0;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9' && v < 100000) {
        v = v * 10 + (p_[j++] - '0');
      }
      out = static_cast<int32_t>(v);
      return j > from;
    };
    auto too_many = [&] { return j < p_.size() && p_[j] >= '0' && p_[j] <= '9'; };
    if (!number(min)) return false;
    if (too_many()) return Error("repetition counts above 1000 are not supported");
    max = min;
    if (j < p_.size() && p_[j] == ',') {
      ++j;
      if (!number(max)) max = -1;
      if (too_many()) return Error("repetition counts above 1000 are not supported");
    }
    if (j >= p_.size() || p_[j] != '}') return false;
    i_ = j + 1;
    if (max >= 0 && max < min) return Error("a repetition's maximum is below its minimum");
    if (min > 1000 || max > 1000) return Error("repetition counts above 1000 are not supported");
    return true;
  }

  absl::StatusOr<NodePtr> Atom() {
    const char c = p_[i_];
    if (c == '(') {
      if (++depth_ > kMaxGroupDepth) return Error("groups nested too deep");
      ++i_;
      NodePtr length;  // (?{m,n}...): a length group; (?~...): a JSON text group
      if (p_.substr(i_, 2) == "?:") {
        i_ += 2;
      } else if (!extensions_ && (p_.substr(i_, 2) == "?~" || p_.substr(i_, 2) == "?{")) {
        return Error("length and JSON text groups are not supported here");
      } else if (p_.substr(i_, 2) == "?~") {
        i_ += 2;
        length = MakeNode(Node::kJsonText);
      } else if (p_.substr(i_, 2) == "?{") {
        ++i_;
        length = MakeNode(Node::kLength);
        auto b = Braces(length->min, length->max);
        if (!b.ok()) return b.status();
        if (!*b) return Error("a length group needs {m}, {m,} or {m,n} after '(?'");
      } else if (!AtEnd() && p_[i_] == '?') {
        return Error("lookaround and named groups are not supported");
      }
      auto inner = Alternation();
      if (!inner.ok()) return inner;
      if (AtEnd() || p_[i_] != ')') return Error("missing ')'");
      ++i_;
      --depth_;
      if (length == nullptr) return inner;
      length->kids.push_back(*std::move(inner));
      return length;
    }
    if (c == '[') return Class();
    if (c == '.') {
      ++i_;
      auto n = MakeNode(Node::kClass);
      n->ascii.set();
      n->ascii.reset('\n');
      n->non_ascii = true;
      return n;
    }
    if (c == '\\') return Escape(/*in_class=*/false);
    if (c == '*' || c == '+' || c == '?') return Error("nothing to repeat");
    if (c == '^' || c == '$') return Error("anchors are only supported at the ends");
    // One character: a UTF-8 lead byte takes its continuation bytes along, so that a
    // quantifier after it repeats the whole character.
    auto n = MakeNode(Node::kBytes);
    n->bytes.push_back(p_[i_++]);
    if ((static_cast<uint8_t>(c) & 0xC0) == 0xC0) {
      while (!AtEnd() && (static_cast<uint8_t>(p_[i_]) & 0xC0) == 0x80)
        n->bytes.push_back(p_[i_++]);
    }
    return n;
  }

  // \d \w \s and their negations, as a class.
  static NodePtr Shorthand(char c) {
    auto n = MakeNode(Node::kClass);
    const char lower = static_cast<char>(c | 0x20);
    for (int b = 0; b < 128; ++b) {
      const bool digit = b >= '0' && b <= '9';
      const bool word = digit || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || b == '_';
      const bool space = b == ' ' || (b >= '\t' && b <= '\r');
      const bool in = lower == 'd' ? digit : lower == 'w' ? word : space;
      n->ascii[b] = in;
    }
    if (c >= 'A' && c <= 'Z') {
      n->ascii.flip();
      n->non_ascii = true;
    }
    return n;
  }

  absl::StatusOr<uint32_t> Hex(size_t digits) {
    if (i_ + digits > p_.size()) return Error("a short hex escape");
    uint32_t v = 0;
    for (size_t k = 0; k < digits; ++k) {
      const char h = p_[i_ + k];
      const int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
      if (d < 0) return Error("a bad hex digit");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    i_ += digits;
    return v;
  }

  // After the backslash: a node (a literal or a class).
  absl::StatusOr<NodePtr> Escape(bool in_class) {
    ++i_;
    if (AtEnd()) return Error("a pattern ending in '\\'");
    const char c = p_[i_++];
    auto literal = [](std::string bytes) {
      auto n = MakeNode(Node::kBytes);
      n->bytes = std::move(bytes);
      return n;
    };
    switch (c) {
      case 'd':
      case 'D':
      case 'w':
      case 'W':
      case 's':
      case 'S':
        return Shorthand(c);
      case 'n':
        return literal("\n");
      case 'r':
        return literal("\r");
      case 't':
        return literal("\t");
      case 'f':
        return literal("\f");
      case 'v':
        return literal("\v");
      case '0':
        return literal(std::string(1, '\0'));
      case 'x':
      case 'u': {
        auto v = Hex(c == 'x' ? 2 : 4);
        if (!v.ok()) return v.status();
        std::string bytes;
        AppendUtf8(static_cast<char32_t>(*v), bytes);
        if (in_class && bytes.size() > 1) return Error("non-ASCII class members are not supported");
        return literal(bytes);
      }
      case 'b':
      case 'B':
      case 'A':
      case 'z':
      case 'Z':
      case 'p':
      case 'P':
      case 'k':
        return Error(absl::StrCat("'\\", std::string(1, c), "' is not supported"));
      default:
        if (c >= '1' && c <= '9') return Error("backreferences are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
          return Error(absl::StrCat("unknown escape '\\", std::string(1, c), "'"));
        }
        return literal(std::string(1, c));
    }
  }

  absl::StatusOr<NodePtr> Class() {
    ++i_;  // '['
    auto n = MakeNode(Node::kClass);
    bool negate = false;
    if (!AtEnd() && p_[i_] == '^') {
      negate = true;
      ++i_;
    }
    bool first = true;
    while (!AtEnd() && (p_[i_] != ']' || first)) {
      first = false;
      int lo;
      if (p_[i_] == '\\') {
        auto e = Escape(/*in_class=*/true);
        if (!e.ok()) return e;
        if ((*e)->kind == Node::kClass) {
          n->ascii |= (*e)->ascii;
          n->non_ascii = n->non_ascii || (*e)->non_ascii;
          continue;
        }
        lo = static_cast<uint8_t>((*e)->bytes[0]);
      } else {
        lo = static_cast<uint8_t>(p_[i_++]);
      }
      int hi = lo;
      if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        if (p_[i_] == '\\') {
          auto e = Escape(/*in_class=*/true);
          if (!e.ok()) return e;
          if ((*e)->kind != Node::kBytes) return Error("a class range ending in a class");
          hi = static_cast<uint8_t>((*e)->bytes[0]);
        } else {
          hi = static_cast<uint8_t>(p_[i_++]);
        }
      }
      if (lo >= 128 || hi >= 128) return Error("non-ASCII class members are not supported");
      if (hi < lo) return Error("a class range out of order");
      for (int b = lo; b <= hi; ++b) n->ascii.set(static_cast<size_t>(b));
    }
    if (AtEnd()) return Error("missing ']'");
    ++i_;
    if (negate) {
      n->ascii.flip();
      n->non_ascii = !n->non_ascii;
    }
    return n;
  }

  // The parser recurses per group (a few small frames each). Deep enough for the patterns a
  // JSON schema of 64 levels becomes (up to 3 groups a level, and a number's bounds inside).
  static constexpr int kMaxGroupDepth = 256;

  std::string_view p_;
  std::string_view field_;
  bool extensions_;
  size_t i_ = 0;
  int depth_ = 0;
};

class Emitter {
 public:
  explicit Emitter(ByteNfa& nfa) : nfa_(nfa) {}

  int32_t NewState() {
    nfa_.states.emplace_back();
    return static_cast<int32_t>(nfa_.states.size() - 1);
  }
  void Edge(int32_t from, uint8_t lo, uint8_t hi, int32_t to) {
    nfa_.states[static_cast<size_t>(from)].edges.push_back({lo, hi, to});
  }
  void Eps(int32_t from, int32_t to) { nfa_.states[static_cast<size_t>(from)].eps.push_back(to); }
  bool too_big() const { return overflow_ || nfa_.states.size() > kMaxNfaStates; }

  // Emits `n` between `from` and a new state it returns.
  int32_t Emit(const Node& n, int32_t from) {
    if (too_big()) return from;
    switch (n.kind) {
      case Node::kEmpty:
        return from;
      case Node::kBytes: {
        int32_t at = from;
        for (char c : n.bytes) {
          const int32_t next = NewState();
          Edge(at, static_cast<uint8_t>(c), static_cast<uint8_t>(c), next);
          at = next;
        }
        return at;
      }
      case Node::kClass:
        return EmitClass(n, from);
      case Node::kConcat: {
        int32_t at = from;
        for (const auto& k : n.kids) at = Emit(*k, at);
        return at;
      }
      case Node::kAlt: {
        const int32_t end = NewState();
        for (const auto& k : n.kids) {
          const int32_t s = NewState();
          Eps(from, s);
          Eps(Emit(*k, s), end);
        }
        return end;
      }
      case Node::kRepeat:
        return EmitRepeat(n, from);
      case Node::kLength:
        return EmitLength(n, from);
      case Node::kJsonText:
        return EmitJsonText(n, from);
    }
    return from;
  }

 private:
  int32_t EmitClass(const Node& n, int32_t from) {
    const int32_t end = NewState();
    for (int b = 0; b < 128;) {
      if (!n.ascii[static_cast<size_t>(b)]) {
        ++b;
        continue;
      }
      int e = b;
      while (e + 1 < 128 && n.ascii[static_cast<size_t>(e + 1)]) ++e;
      Edge(from, static_cast<uint8_t>(b), static_cast<uint8_t>(e), end);
      b = e + 1;
    }
    if (n.non_ascii) {
      // One non-ASCII character, as well-formed UTF-8 (no overlong forms, no surrogates,
      // nothing past U+10FFFF): a lead byte range, the range of its first continuation byte,
      // then plain continuation bytes.
      struct Form {
        uint8_t lead_lo, lead_hi, next_lo, next_hi;
        int rest;
      };
      static constexpr Form kForms[] = {{0xC2, 0xDF, 0x80, 0xBF, 0}, {0xE0, 0xE0, 0xA0, 0xBF, 1},
                                        {0xE1, 0xEC, 0x80, 0xBF, 1}, {0xED, 0xED, 0x80, 0x9F, 1},
                                        {0xEE, 0xEF, 0x80, 0xBF, 1}, {0xF0, 0xF0, 0x90, 0xBF, 2},
                                        {0xF1, 0xF3, 0x80, 0xBF, 2}, {0xF4, 0xF4, 0x80, 0x8F, 2}};
      for (const Form& f : kForms) {
        const int32_t lead = NewState();
        Edge(from, f.lead_lo, f.lead_hi, lead);
        int32_t at = f.rest == 0 ? end : NewState();
        Edge(lead, f.next_lo, f.next_hi, at);
        for (int c = 0; c < f.rest; ++c) {
          const int32_t next = c + 1 == f.rest ? end : NewState();
          Edge(at, 0x80, 0xBF, next);
          at = next;
        }
      }
    }
    return end;
  }

  int32_t EmitRepeat(const Node& n, int32_t from) {
    const Node& kid = *n.kids[0];
    int32_t at = from;
    for (int32_t k = 0; k < n.min && !too_big(); ++k) at = Emit(kid, at);
    if (n.max < 0) {
      // Zero or more further copies: a loop through one copy.
      const int32_t loop = NewState();
      Eps(at, loop);
      const int32_t body_end = Emit(kid, loop);
      Eps(body_end, loop);
      return loop;
    }
    const int32_t end = NewState();
    Eps(at, end);
    for (int32_t k = n.min; k < n.max && !too_big(); ++k) {
      at = Emit(kid, at);
      Eps(at, end);
    }
    return end;
  }

  // `n` as an automaton of its own, for a group to copy into this one `copies` times;
  // nullopt (and the pattern too big) when those copies would pass kMaxNfaStates.
  std::optional<ByteNfa> EmitApart(const Node& n, int64_t copies) {
    ByteNfa kid;
    Emitter sub(kid);
    kid.start = sub.NewState();
    kid.accept = sub.Emit(n, kid.start);
    if (sub.too_big() || static_cast<int64_t>(nfa_.states.size()) +
                                 static_cast<int64_t>(kid.states.size()) * copies >
                             static_cast<int64_t>(kMaxNfaStates)) {
      overflow_ = true;
      return std::nullopt;
    }
    return kid;
  }

  // The kid's language cut to strings of n.min..n.max characters: its automaton once per
  // count of characters read so far (a character starts at each byte that is not a UTF-8
  // continuation byte; the kid matches well-formed UTF-8 only), the last copy absorbing
  // further characters when there is no maximum.
  int32_t EmitLength(const Node& n, int32_t from) {
    const int64_t layers = (n.max < 0 ? n.min : n.max) + 1;
    const std::optional<ByteNfa> apart = EmitApart(*n.kids[0], layers);
    if (!apart) return from;
    const ByteNfa& kid = *apart;
    const auto states = static_cast<int64_t>(kid.states.size());
    const auto base = static_cast<int32_t>(nfa_.states.size());
    nfa_.states.resize(nfa_.states.size() + static_cast<size_t>(states * layers));
    const auto at = [&](int32_t state, int64_t layer) {
      return base + static_cast<int32_t>(layer * states) + state;
    };
    for (int64_t c = 0; c < layers; ++c) {
      const int64_t next = c + 1 < layers ? c + 1 : (n.max < 0 ? c : -1);
      for (int32_t s = 0; s < static_cast<int32_t>(states); ++s) {
        const NfaState& st = kid.states[static_cast<size_t>(s)];
        for (int32_t t : st.eps) Eps(at(s, c), at(t, c));
        for (const NfaState::Edge& e : st.edges) {
          // Continuation bytes stay in the layer; any other byte starts a character.
          const uint8_t cont_lo = std::max<uint8_t>(e.lo, 0x80),
                        cont_hi = std::min<uint8_t>(e.hi, 0xBF);
          if (cont_lo <= cont_hi) Edge(at(s, c), cont_lo, cont_hi, at(e.to, c));
          if (next < 0) continue;
          if (e.lo < 0x80) Edge(at(s, c), e.lo, std::min<uint8_t>(e.hi, 0x7F), at(e.to, next));
          if (e.hi > 0xBF) Edge(at(s, c), std::max<uint8_t>(e.lo, 0xC0), e.hi, at(e.to, next));
        }
      }
    }
    Eps(from, at(kid.start, 0));
    const int32_t end = NewState();
    for (int64_t c = n.min; c < layers; ++c) Eps(at(kid.accept, c), end);
    return end;
  }

  // The kid's language without the strings that hold a byte a JSON string must escape
  // (control bytes, '"', '\\'): its automaton with those bytes taken off every edge.
  int32_t EmitJsonText(const Node& n, int32_t from) {
    const std::optional<ByteNfa> apart = EmitApart(*n.kids[0], 1);
    if (!apart) return from;
    const ByteNfa& kid = *apart;
    const auto base = static_cast<int32_t>(nfa_.states.size());
    nfa_.states.resize(nfa_.states.size() + kid.states.size());
    for (size_t s = 0; s < kid.states.size(); ++s) {
      const auto at = base + static_cast<int32_t>(s);
      for (int32_t t : kid.states[s].eps) Eps(at, base + t);
      for (const NfaState::Edge& e : kid.states[s].edges) {
        // [lo, hi] less 0x00-0x1F, '"' and '\\': at most three runs.
        int lo = std::max<int>(e.lo, 0x20);
        for (int cut : {static_cast<int>('"'), static_cast<int>('\\'), 256}) {
          const int hi = std::min<int>(e.hi, cut - 1);
          if (lo <= hi) Edge(at, static_cast<uint8_t>(lo), static_cast<uint8_t>(hi), base + e.to);
          lo = std::max(lo, cut + 1);
        }
      }
    }
    Eps(from, base + kid.start);
    return base + kid.accept;
  }

  ByteNfa& nfa_;
  bool overflow_ = false;
};

}  // namespace

absl::StatusOr<ByteNfa> ParseRegex(std::string_view pattern, std::string_view field,
                                   bool extensions) {
  Parser parser(pattern, field, extensions);
  auto root = parser.Parse();
  if (!root.ok()) return root.status();
  ByteNfa nfa;
  Emitter emit(nfa);
  nfa.start = emit.NewState();
  nfa.accept = emit.Emit(**root, nfa.start);
  if (emit.too_big()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(field), ": the pattern expands to more than ", kMaxNfaStates,
                     " states (counted repetitions multiply what they repeat); simplify it"));
  }
  return nfa;
}

std::string EscapeRegex(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (std::string_view("\\^$.|?*+()[]{}/").find(c) != std::string_view::npos) out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[(c >> 4) & 0xF];
      out += kHex[c & 0xF];
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace llm::constraint
