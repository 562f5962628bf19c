#include "worker/constraint/gbnf.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/utf8.h"
#include "worker/constraint/byte_regex.h"

namespace llm::constraint {
namespace {

constexpr size_t kMaxPatternBytes = size_t{2} << 20;
constexpr int kMaxNesting = 100;             // groups inside groups
constexpr int kMaxCount = 1000;              // {m,n}
constexpr int64_t kMaxExpansions = 1000000;  // nodes generated
constexpr int kMaxRuleNesting = 1000;        // rules being expanded inside one another

struct Node {
  enum class Type { kLiteral, kClass, kAny, kRef, kSeq, kAlt, kRepeat };
  Type type = Type::kSeq;
  std::string text;  // literal bytes, class regex, or the rule referred to
  std::vector<Node> children;
  int min = 0, max = -1;  // kRepeat; max -1: unbounded
};

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  absl::Status Parse(std::map<std::string, Node>& rules) {
    SkipSpace();
    while (i_ < s_.size()) {
      rule_ = Name();
      if (rule_.empty()) return Error("expected a rule name");
      SkipSpace();
      if (s_.substr(i_, 3) != "::=") return Error("expected '::=' after the rule's name");
      i_ += 3;
      auto body = Alternatives(0);
      if (!body.ok()) return body.status();
      if (i_ < s_.size() && !AtRuleStart()) {
        return Error(absl::StrCat("unexpected '", std::string(1, s_[i_]), "'"));
      }
      if (!rules.emplace(rule_, *std::move(body)).second) return Error("is defined twice");
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("constraint.grammar: ", rule_.empty() ? "" : "rule '" + rule_ + "': ", what,
                     " at offset ", i_));
  }

  // Spaces, newlines and comments.
  void SkipSpace() {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++i_;
      } else {
        break;
      }
    }
  }

  std::string Name() {
    const size_t from = i_;
    while (i_ < s_.size() && IsNameChar(s_[i_])) ++i_;
    return std::string(s_.substr(from, i_ - from));
  }

  // The next rule begins here: a name, then '::='.
  bool AtRuleStart() const {
    size_t j = i_;
    while (j < s_.size() && IsNameChar(s_[j])) ++j;
    if (j == i_) return false;
    while (j < s_.size() && (s_[j] == ' ' || s_[j] == '\t')) ++j;
    return s_.substr(j, 3) == "::=";
  }

  absl::StatusOr<Node> Alternatives(int depth) {
    Node alt{Node::Type::kAlt};
    while (true) {
      auto seq = Sequence(depth);
      if (!seq.ok()) return seq.status();
      alt.children.push_back(*std::move(seq));
      if (i_ >= s_.size() || s_[i_] != '|') break;
      ++i_;
    }
    if (alt.children.size() == 1) return std::move(alt.children[0]);
    return alt;
  }

  absl::StatusOr<Node> Sequence(int depth) {
    Node seq{Node::Type::kSeq};
    while (true) {
      SkipSpace();
      if (i_ >= s_.size() || s_[i_] == '|' || s_[i_] == ')' || AtRuleStart()) break;
      auto element = Element(depth);
      if (!element.ok()) return element.status();
      seq.children.push_back(*std::move(element));
    }
    return seq;
  }

  absl::StatusOr<Node> Element(int depth) {
    absl::StatusOr<Node> n;
    const char c = s_[i_];
    if (c == '"') {
      n = Literal();
    } else if (c == '[') {
      n = Class();
    } else if (c == '.') {
      ++i_;
      n = Node{Node::Type::kAny};
    } else if (c == '(') {
      if (depth + 1 > kMaxNesting) return Error("groups nest too deep");
      ++i_;
      n = Alternatives(depth + 1);
      if (n.ok() && (i_ >= s_.size() || s_[i_] != ')')) return Error("a '(' is not closed");
      ++i_;
    } else if (IsNameChar(c)) {
      n = Node{Node::Type::kRef, Name()};
    } else {
      return Error(absl::StrCat("unexpected '", std::string(1, c), "'"));
    }
    if (!n.ok()) return n;
    return Quantified(*std::move(n));
  }

  // Spaces and tabs (not newlines: a rule may end at one).
  void SkipBlanks() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t')) ++i_;
  }

  absl::StatusOr<Node> Quantified(Node n) {
    const size_t before = i_;
    SkipBlanks();  // llama.cpp takes `"a" *`
    if (i_ >= s_.size() || std::string_view("*+?{").find(s_[i_]) == std::string_view::npos) {
      i_ = before;
      return n;
    }
    int min = 0, max = -1;
    const char c = s_[i_];
    if (c == '*') {
      ++i_;
    } else if (c == '+') {
      min = 1;
      ++i_;
    } else if (c == '?') {
      max = 1;
      ++i_;
    } else if (c == '{') {
      ++i_;
      SkipBlanks();
      auto lo = Count();
      if (!lo.ok()) return lo.status();
      min = max = *lo;
      SkipBlanks();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        SkipBlanks();
        max = -1;
        if (i_ < s_.size() && s_[i_] != '}') {
          auto hi = Count();
          if (!hi.ok()) return hi.status();
          if (*hi < min) return Error("a repetition's maximum is below its minimum");
          max = *hi;
          SkipBlanks();
        }
      }
      if (i_ >= s_.size() || s_[i_] != '}') return Error("a '{' is not closed");
      ++i_;
    } else {
      return n;
    }
    Node r{Node::Type::kRepeat};
    r.children.push_back(std::move(n));
    r.min = min;
    r.max = max;
    return r;
  }

  absl::StatusOr<int> Count() {
    int v = 0;
    const size_t from = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      v = v * 10 + (s_[i_++] - '0');
      if (v > kMaxCount) return Error(absl::StrCat("a repetition count above ", kMaxCount));
    }
    if (i_ == from) return Error("expected a repetition count");
    return v;
  }

  // After a backslash: the code point it stands for.
  absl::StatusOr<uint32_t> Escape() {
    if (i_ >= s_.size()) return Error("a '\\' ends the grammar");
    const char c = s_[i_++];
    int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (digits == 0) {
      switch (c) {
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case '\\':
        case '"':
        case '\'':
        case '[':
        case ']':
        case '-':
          return static_cast<uint32_t>(c);
        default:
          return Error(absl::StrCat("unknown escape '\\", std::string(1, c), "'"));
      }
    }
    uint32_t cp = 0;
    for (; digits > 0; --digits) {
      const char h = i_ < s_.size() ? s_[i_++] : '\0';
      const int v = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
      if (v < 0) return Error("a hex escape needs hex digits");
      cp = cp * 16 + static_cast<uint32_t>(v);
    }
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return Error("not a character's code");
    return cp;
  }

  absl::StatusOr<Node> Literal() {
    ++i_;  // the opening quote
    Node n{Node::Type::kLiteral};
    while (true) {
      if (i_ >= s_.size()) return Error("a '\"' is not closed");
      const char c = s_[i_++];
      if (c == '"') break;
      if (c != '\\') {
        n.text += c;
        continue;
      }
      auto cp = Escape();
      if (!cp.ok()) return cp.status();
      AppendUtf8(static_cast<char32_t>(*cp), n.text);
    }
    return n;
  }

  absl::StatusOr<uint32_t> ClassMember() {
    const char c = s_[i_++];
    if (c == '\\') return Escape();
    if (static_cast<unsigned char>(c) >= 0x80) {
      return Error("character class members beyond ASCII are not supported");
    }
    return static_cast<uint32_t>(c);
  }

  absl::StatusOr<Node> Class() {
    ++i_;  // '['
    Node n{Node::Type::kClass, "["};
    if (i_ < s_.size() && s_[i_] == '^') {
      n.text += '^';
      ++i_;
    }
    bool any = false;
    while (true) {
      if (i_ >= s_.size()) return Error("a '[' is not closed");
      if (s_[i_] == ']') break;
      auto lo = ClassMember();
      if (!lo.ok()) return lo.status();
      uint32_t hi = *lo;
      if (i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
        ++i_;
        auto h = ClassMember();
        if (!h.ok()) return h.status();
        hi = *h;
      }
      if (*lo >= 0x80 || hi >= 0x80) {
        return Error("character class members beyond ASCII are not supported");
      }
      if (hi < *lo) return Error("a class range runs backwards");
      absl::StrAppend(&n.text, absl::StrFormat("\\x%02x", *lo));
      if (hi != *lo) absl::StrAppend(&n.text, absl::StrFormat("-\\x%02x", hi));
      any = true;
    }
    ++i_;  // ']'
    if (!any) return Error("an empty character class");
    n.text += ']';
    return n;
  }

  std::string_view s_;
  size_t i_ = 0;
  std::string rule_;
};

// Collects the rules `n` refers to.
void RefsOf(const Node& n, std::set<std::string>& out) {
  if (n.type == Node::Type::kRef) out.insert(n.text);
  for (const Node& c : n.children) RefsOf(c, out);
}

// The rules that may refer to themselves: what is left of the reference graph once rules
// nothing refers to, and rules that refer to nothing, are peeled off again and again (linear
// in the grammar's size). That keeps every rule on a cycle, and also any rule between two
// cycles, which then gets an automaton of its own without needing one (the same language).
std::set<std::string> RecursiveRules(const std::map<std::string, Node>& rules) {
  std::map<std::string, int> index;
  for (const auto& [name, body] : rules) index.emplace(name, static_cast<int>(index.size()));
  const size_t n = index.size();
  std::vector<std::vector<int>> out(n), in(n);
  for (const auto& [name, body] : rules) {
    std::set<std::string> refs;
    RefsOf(body, refs);
    for (const std::string& r : refs) {
      if (auto it = index.find(r); it != index.end()) {
        out[static_cast<size_t>(index[name])].push_back(it->second);
        in[static_cast<size_t>(it->second)].push_back(index[name]);
      }
    }
  }
  std::vector<uint8_t> gone(n, 0);
  // Peels rules with no edge left in `edges` (counted in `count`), following `other`.
  const auto peel = [&](const std::vector<std::vector<int>>& edges,
                        const std::vector<std::vector<int>>& other) {
    std::vector<size_t> count(n, 0);
    std::vector<int> todo;
    for (size_t r = 0; r < n; ++r) {
      if (gone[r]) continue;
      for (int e : edges[r]) count[r] += gone[static_cast<size_t>(e)] ? 0 : 1;
      if (count[r] == 0) todo.push_back(static_cast<int>(r));
    }
    while (!todo.empty()) {
      const auto r = static_cast<size_t>(todo.back());
      todo.pop_back();
      gone[r] = 1;
      for (int e : other[r]) {
        const auto u = static_cast<size_t>(e);
        if (!gone[u] && --count[u] == 0) todo.push_back(e);
      }
    }
  };
  peel(in, out);  // nothing refers to them
  peel(out, in);  // they refer to nothing
  std::set<std::string> recursive;
  for (const auto& [name, i] : index) {
    if (!gone[static_cast<size_t>(i)]) recursive.insert(name);
  }
  return recursive;
}

// Expands rules into regexes: a rule that does not recurse is written out where it is
// referred to; one that does is a call (CallMarker) to its own pattern, generated once.
class Generator {
 public:
  explicit Generator(const std::map<std::string, Node>& rules)
      : rules_(rules), recursive_(RecursiveRules(rules)) {}

  // The pattern of rule `name` (defined) as an automaton of its own.
  std::optional<std::string> Body(const std::string& name) {
    current_ = name;
    return Gen(rules_.at(name));
  }
  // The index of rule `name`'s own pattern; a new one is generated after the ones before.
  int32_t IndexOf(const std::string& name) {
    const auto it = std::find(names_.begin(), names_.end(), name);
    if (it != names_.end()) return static_cast<int32_t>(it - names_.begin());
    names_.push_back(name);
    return static_cast<int32_t>(names_.size() - 1);
  }
  const std::vector<std::string>& names() const { return names_; }
  bool recursive(const std::string& name) const { return recursive_.count(name) != 0; }

  std::optional<std::string> Rule(const std::string& name) {
    const auto it = rules_.find(name);
    if (it == rules_.end()) {
      Fail(
          absl::StrCat("rule '", current_, "': refers to rule '", name, "', which is not defined"));
      return std::nullopt;
    }
    if (recursive(name)) return CallMarker(IndexOf(name));
    // A chain of distinct rules is no recursion, but each link is a few frames of this thread.
    if (nesting_ >= kMaxRuleNesting) {
      Fail(absl::StrCat("rule '", name, "': rules nest more than ", kMaxRuleNesting, " deep"));
      return std::nullopt;
    }
    const std::string outer = current_;
    current_ = name;
    ++nesting_;
    std::optional<std::string> out = Gen(it->second);
    --nesting_;
    current_ = outer;
    return out;
  }

  const absl::Status& status() const { return status_; }

 private:
  void Fail(const std::string& what) {
    if (status_.ok()) status_ = absl::InvalidArgumentError("constraint.grammar: " + what);
  }

  // False (and the grammar fails) when a pattern of `bytes` would be over the budget.
  bool WithinBudget(size_t bytes) {
    if (bytes <= kMaxPatternBytes) return true;
    Fail(absl::StrCat("rule '", current_, "': expands to more than ", kMaxPatternBytes >> 20,
                      " MiB of pattern"));
    return false;
  }

  std::optional<std::string> Gen(const Node& n) {
    if (!status_.ok()) return std::nullopt;
    if (++expansions_ > kMaxExpansions) {
      Fail(absl::StrCat("expands to more than ", kMaxExpansions, " pieces"));
      return std::nullopt;
    }
    std::optional<std::string> out = GenNode(n);
    if (out && !WithinBudget(out->size())) return std::nullopt;
    return out;
  }

  std::optional<std::string> GenNode(const Node& n) {
    switch (n.type) {
      case Node::Type::kLiteral:
        return EscapeRegex(n.text);
      case Node::Type::kClass:
        return n.text;
      case Node::Type::kAny:
        return std::string("(.|\\n)");
      case Node::Type::kRef:
        return Rule(n.text);
      case Node::Type::kSeq: {
        std::string out;
        for (const Node& c : n.children) {
          std::optional<std::string> part = Gen(c);
          if (!part || !WithinBudget(out.size() + part->size())) return std::nullopt;
          out += *part;
        }
        return out;
      }
      case Node::Type::kAlt:
        return Alternatives(n);
      case Node::Type::kRepeat:
        return Repeat(n);
    }
    return std::nullopt;
  }

  std::optional<std::string> Alternatives(const Node& n) {
    std::vector<std::string> parts;
    bool empty = false;
    size_t total = 0;
    for (const Node& c : n.children) {
      std::optional<std::string> part = Gen(c);
      if (!status_.ok()) return std::nullopt;
      if (!part) continue;
      total += part->size() + 1;
      if (!WithinBudget(total)) return std::nullopt;
      if (part->empty()) {
        empty = true;
      } else {
        parts.push_back(*std::move(part));
      }
    }
    if (parts.empty()) return empty ? std::optional<std::string>("") : std::nullopt;
    return absl::StrCat("(", absl::StrJoin(parts, "|"), ")", empty ? "?" : "");
  }

  std::optional<std::string> Repeat(const Node& n) {
    std::optional<std::string> inner = Gen(n.children[0]);
    if (!inner) return n.min == 0 ? std::optional<std::string>("") : std::nullopt;
    if (inner->empty()) return inner;
    std::string q;
    if (n.min == 0 && n.max == -1) {
      q = "*";
    } else if (n.min == 1 && n.max == -1) {
      q = "+";
    } else if (n.min == 0 && n.max == 1) {
      q = "?";
    } else if (n.max == -1) {
      q = absl::StrCat("{", n.min, ",}");
    } else if (n.min == n.max) {
      q = absl::StrCat("{", n.min, "}");
    } else {
      q = absl::StrCat("{", n.min, ",", n.max, "}");
    }
    return absl::StrCat("(", *inner, ")", q);
  }

  const std::map<std::string, Node>& rules_;
  const std::set<std::string> recursive_;
  std::vector<std::string> names_;  // rules with patterns of their own; [0] the root
  int nesting_ = 0;                 // rules being expanded now
  std::string current_ = "root";
  int64_t expansions_ = 0;
  absl::Status status_;
};

}  // namespace

absl::StatusOr<RulePatterns> GbnfToPatterns(std::string_view grammar) {
  std::map<std::string, Node> rules;
  Parser parser(grammar);
  if (absl::Status st = parser.Parse(rules); !st.ok()) return st;
  if (!rules.count("root")) {
    return absl::InvalidArgumentError("constraint.grammar: no rule 'root' (the output's rule)");
  }
  Generator gen(rules);
  RulePatterns out;
  gen.IndexOf("root");
  size_t total = 0;
  for (size_t i = 0; i < gen.names().size(); ++i) {  // grows as calls name new rules
    const std::string name = gen.names()[i];
    std::optional<std::string> body = gen.Body(name);
    if (!gen.status().ok()) return gen.status();
    if (!body) return absl::InternalError("constraint.grammar: rule '" + name + "' failed");
    total += body->size();
    if (total > kMaxPatternBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("constraint.grammar: the rules expand to more than ", kMaxPatternBytes >> 20,
                       " MiB of pattern"));
    }
    out.patterns.push_back(*std::move(body));
  }
  if (out.patterns[0].empty()) {
    return absl::InvalidArgumentError("constraint.grammar: rule 'root' writes only the empty text");
  }
  out.names = gen.names();
  out.calls = out.names.size() > 1 || gen.recursive("root");
  return out;
}

}  // namespace llm::constraint
