#include "worker/constraint/constraint.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "worker/constraint/gbnf.h"
#include "worker/constraint/json_schema.h"

namespace llm::constraint {
absl::StatusOr<RulePatterns> PatternsOf(const ConstraintSpec& spec) {
  RulePatterns out{{"root"}, {""}, false};
  switch (spec.kind) {
    case Kind::kRegex:
      if (spec.worker_built()) return spec.built;
      out.patterns[0] = spec.text;
      break;
    case Kind::kChoice:
      for (size_t i = 0; i < spec.choices.size(); ++i) {
        absl::StrAppend(&out.patterns[0], i > 0 ? "|" : "", "(", EscapeRegex(spec.choices[i]), ")");
      }
      break;
    case Kind::kJsonObject:
      return JsonObjectPatterns();
    case Kind::kJsonSchema:
      return JsonSchemaToPatterns(spec.text);
    case Kind::kGrammar:
      return GbnfToPatterns(spec.text);
    case Kind::kNone:
      break;
  }
  return out;
}

std::string CacheKeyOf(const ConstraintSpec& spec) {
  std::string key(1, static_cast<char>(spec.kind));
  key += spec.worker_built() ? 'w' : 'c';  // a client's regex may not use the extensions
  // Each part after its length, so that no two specs' parts join into one key.
  const auto part = [&key](const std::string& p) { absl::StrAppend(&key, p.size(), ":", p); };
  part(spec.text);
  for (const std::string& c : spec.choices) part(c);
  for (size_t i = 0; i < spec.built.patterns.size(); ++i) {
    part(spec.built.names[i]);
    part(spec.built.patterns[i]);
  }
  return key;
}

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> Compile(
    const ConstraintSpec& spec, std::shared_ptr<const TokenTable> tokens) {
  std::string field = "constraint";
  if (spec.kind == Kind::kChoice) {
    if (spec.choices.empty()) {
      return absl::InvalidArgumentError("constraint.choice: give at least one string");
    }
    for (size_t i = 0; i < spec.choices.size(); ++i) {
      if (spec.choices[i].empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("constraint.choice[", i, "]: an empty string"));
      }
    }
    field = "constraint.choice";
  } else if (spec.worker_built()) {
    field = "tools";
  } else if (spec.kind == Kind::kRegex) {
    if (spec.text.empty()) return absl::InvalidArgumentError("constraint.regex: empty");
    field = "constraint.regex";
  } else if (spec.kind == Kind::kJsonObject) {
    field = "constraint.json_object";
  } else if (spec.kind == Kind::kJsonSchema) {
    field = "constraint.json_schema";
  } else if (spec.kind == Kind::kGrammar) {
    if (spec.text.empty()) return absl::InvalidArgumentError("constraint.grammar: empty");
    field = "constraint.grammar";
  }
  auto patterns = PatternsOf(spec);
  if (!patterns.ok()) return patterns.status();
  std::shared_ptr<const CompiledConstraint> c;
  if (patterns->calls) {
    auto pda = Pushdown::Build(*patterns, kMaxDfaStates, field);
    if (!pda.ok()) return pda.status();
    c = std::make_shared<const CompiledConstraint>(*std::move(pda), std::move(tokens));
  } else {
    // A client's regex is parsed as written; every other kind is a pattern the worker built.
    auto nfa =
        ParseRegex(patterns->patterns[0], field, spec.kind != Kind::kRegex || spec.worker_built());
    if (!nfa.ok()) return nfa.status();
    auto dfa = ByteDfa::Build(*nfa, kMaxDfaStates, field);
    if (!dfa.ok()) return dfa.status();
    c = std::make_shared<const CompiledConstraint>(*std::move(dfa), std::move(tokens));
  }
  // A vocabulary that cannot spell the constraint's first bytes (a story model without braces,
  // asked for JSON) fails the request here rather than ending it empty.
  const Position start = c->Start();
  if (!c->Accepting(start)) {
    const std::shared_ptr<const TokenMask> mask = c->MaskAt(start);
    if (std::all_of(mask->begin(), mask->end(), [](uint64_t w) { return w == 0; })) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": no token of the model's vocabulary can begin an output of it"));
    }
  }
  return c;
}

namespace {

// The byte classes whose bytes all lead from `state` to one state (TokenTable::MaskByClass),
// with kComputed set.
constexpr uint64_t kComputed = uint64_t{1} << 63;
static_assert(TokenTable::kNumClasses < 63);

uint64_t UniformClasses(const ByteDfa& dfa, int32_t state) {
  return TokenTable::UniformClasses([&](uint8_t b) { return dfa.Next(state, b); }) | kComputed;
}

}  // namespace

CompiledConstraint::CompiledConstraint(ByteDfa dfa, std::shared_ptr<const TokenTable> tokens)
    : dfa_(std::move(dfa)),
      tokens_(std::move(tokens)),
      uniform_(std::make_unique<std::atomic<uint64_t>[]>(dfa_.num_states())),
      masks_(dfa_.num_states()) {}

CompiledConstraint::CompiledConstraint(Pushdown pda, std::shared_ptr<const TokenTable> tokens)
    : pda_(std::make_unique<const Pushdown>(std::move(pda))), tokens_(std::move(tokens)) {}

Position CompiledConstraint::Start() const {
  return pda_ ? Position{0, pda_->Start()} : Position{dfa_.start(), {}};
}

bool CompiledConstraint::Walk(Position& p, std::string_view bytes) const {
  if (pda_) {
    if (!p.stacks.empty()) p.stacks = pda_->Walk(p.stacks, bytes);
    return !p.stacks.empty();
  }
  if (p.state != ByteDfa::kDead) p.state = dfa_.Walk(p.state, bytes);
  return p.state != ByteDfa::kDead;
}

bool CompiledConstraint::Dead(const Position& p) const {
  return pda_ ? p.stacks.empty() : p.state == ByteDfa::kDead;
}

bool CompiledConstraint::Accepting(const Position& p) const {
  if (Dead(p)) return false;
  return pda_ ? pda_->Complete(p.stacks) : dfa_.accepting(p.state);
}

std::shared_ptr<const TokenMask> CompiledConstraint::MaskAt(const Position& p) const {
  if (!pda_) return MaskOf(p.state);
  auto mask = [&] { return std::make_shared<TokenMask>(MaskWords(tokens_->vocab_size()), 0); };
  // Kept top-frame masks stand for one stack away from the depth limit; several stacks, or
  // one a token could take to the limit, are walked whole, so that the mask is what Walk
  // does, limits included.
  const bool near_limit =
      p.stacks.size() == 1 && pda_->NearLimit(p.stacks[0].size(), tokens_->max_token_bytes());
  if (p.stacks.size() != 1 || near_limit) {
    auto whole = mask();
    pda_->WholeMaskAt(p.stacks, *tokens_, *whole);
    return whole;
  }
  std::shared_ptr<const FrameMask> top = FrameMaskOf(p.stacks[0]);
  // Where the top frames decide alone (most steps): their kept mask, as is.
  if (top->returns.empty() && !top->overflow) {
    return std::shared_ptr<const TokenMask>(top, &top->words);
  }
  auto words = mask();
  pda_->MaskAt(p.stacks[0], *top, *tokens_, *words);
  return words;
}

std::shared_ptr<const FrameMask> CompiledConstraint::FrameMaskOf(const Stack& stack) const {
  const size_t n = std::min(stack.size(), Pushdown::kMaskFrames);
  const Stack top(stack.end() - static_cast<std::ptrdiff_t>(n), stack.end());
  const bool whole = n == stack.size();
  std::string key(reinterpret_cast<const char*>(top.data()), n * sizeof(Frame));
  key += whole ? 'w' : 'p';
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = frame_masks_.find(key); it != frame_masks_.end()) return it->second;
  }
  auto mask = std::make_shared<const FrameMask>(pda_->FrameMaskOf(top, whole, *tokens_));
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = frame_masks_.find(key); it != frame_masks_.end()) return it->second;
  // An overflowed walk is redone whole per use: not worth keeping.
  if (!mask->overflow &&
      Keep(mask->words.size() * sizeof(uint64_t) + mask->returns.size() * sizeof(uint32_t))) {
    frame_masks_.emplace(std::move(key), mask);
  }
  return mask;
}

bool CompiledConstraint::Keep(size_t bytes) const {
  if (mask_bytes_ + bytes > kMaxMaskBytes) return false;
  mask_bytes_ += bytes;
  return true;
}

std::shared_ptr<const TokenMask> CompiledConstraint::MaskOf(int32_t state) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (masks_[static_cast<size_t>(state)]) return masks_[static_cast<size_t>(state)];
  }
  // Computed outside the lock; two requests racing to the same new state both compute it and
  // the first result is kept (the same bits either way).
  auto mask = std::make_shared<TokenMask>(MaskWords(tokens_->vocab_size()));
  tokens_->MaskByClass(
      state, [&](int32_t s, uint8_t b) { return dfa_.Next(s, b); },
      [&](int32_t s) {
        // Computed at a state's first walk; two walks racing write the same bits.
        std::atomic<uint64_t>& u = uniform_[static_cast<size_t>(s)];
        uint64_t bits = u.load(std::memory_order_relaxed);
        if (bits == 0) {
          bits = UniformClasses(dfa_, s);
          u.store(bits, std::memory_order_relaxed);
        }
        return bits;
      },
      *mask);
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = masks_[static_cast<size_t>(state)];
  if (slot) return slot;
  if (!Keep(mask->size() * sizeof(uint64_t))) return mask;  // used once, not kept
  slot = std::move(mask);
  return slot;
}

Matcher::Matcher(std::shared_ptr<const CompiledConstraint> constraint)
    : c_(std::move(constraint)), pos_(c_->Start()) {}

void Matcher::Apply(std::span<float> logits, std::span<const int32_t> stop_ids) {
  scratch_.resize(MaskWords(static_cast<int64_t>(logits.size())));
  WriteMask(scratch_, stop_ids);
  ApplyTokenMask(logits, scratch_);
}

void Matcher::WriteMask(std::span<uint64_t> words, std::span<const int32_t> stop_ids) const {
  const size_t ids = words.size() * 64;
  const auto set = [&](int32_t id, bool on) {
    if (id < 0 || static_cast<size_t>(id) >= ids) return;
    const uint64_t bit = uint64_t{1} << (id % 64);
    words[id / 64] = on ? words[id / 64] | bit : words[id / 64] & ~bit;
  };
  std::fill(words.begin(), words.end(), uint64_t{0});
  if (c_->Dead(pos_)) {
    // Cannot happen when every sampled token went through the mask (but for a pushdown
    // output past its limits); end the output if it does.
    for (int32_t id : stop_ids) set(id, true);
    return;
  }
  const std::shared_ptr<const TokenMask> shared = c_->MaskAt(pos_);
  const TokenMask& mask = *shared;
  const size_t vocab = std::min(ids, static_cast<size_t>(c_->tokens().vocab_size()));
  const size_t full = vocab / 64;
  std::copy(mask.begin(), mask.begin() + static_cast<std::ptrdiff_t>(full), words.begin());
  if (vocab % 64 != 0) words[full] = mask[full] & ((uint64_t{1} << (vocab % 64)) - 1);
  // A complete output may end: its stop ids are allowed (their mask bits are clear: special
  // tokens). An incomplete one may not, unless nothing else can follow (a vocabulary that
  // cannot spell the rest): then it ends rather than loop. Not even a stop id that is an
  // ordinary token (a request's "," say) may end an incomplete output.
  const bool may_end = c_->Accepting(pos_) ||
                       std::all_of(mask.begin(), mask.end(), [](uint64_t w) { return w == 0; });
  for (int32_t id : stop_ids) set(id, may_end);
}

namespace {

// Per byte value, the 8 lanes' keep masks: all ones where the byte's bit is set.
constexpr std::array<std::array<uint32_t, 8>, 256> MakeKeepLanes() {
  std::array<std::array<uint32_t, 8>, 256> keep{};
  for (int b = 0; b < 256; ++b) {
    for (int i = 0; i < 8; ++i) keep[b][i] = (b >> i & 1) != 0 ? ~uint32_t{0} : 0;
  }
  return keep;
}
alignas(64) constexpr std::array<std::array<uint32_t, 8>, 256> kKeepLanes = MakeKeepLanes();

// Sets the 64 logits at `logits` to -inf where `bits` is clear, without a branch per logit
// (eight lanes at a time, as vector selects), so a word of mixed bits costs about as much as
// copying it: inside a JSON string most words allow all but a token or two.
void ApplyMixedWord(float* logits, uint64_t bits) {
  constexpr uint32_t kNegInf = 0xFF800000u;
  uint32_t lanes[64];
  std::memcpy(lanes, logits, sizeof(lanes));
  for (int k = 0; k < 8; ++k) {
    const std::array<uint32_t, 8>& keep = kKeepLanes[(bits >> (8 * k)) & 0xFF];
    for (int i = 0; i < 8; ++i) {
      uint32_t& v = lanes[8 * k + i];
      v = (v & keep[i]) | (kNegInf & ~keep[i]);
    }
  }
  std::memcpy(logits, lanes, sizeof(lanes));
}

}  // namespace

void ApplyTokenMask(std::span<float> logits, std::span<const uint64_t> words) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const size_t covered = std::min(logits.size(), words.size() * 64);
  // A word at a time: all-allowed words (inside a string, most) cost nothing.
  for (size_t w = 0; w * 64 < covered; ++w) {
    const uint64_t bits = words[w];
    const size_t end = std::min(covered, (w + 1) * 64);
    if (bits == ~uint64_t{0}) continue;
    if (bits == 0) {
      std::fill(logits.begin() + static_cast<std::ptrdiff_t>(w * 64),
                logits.begin() + static_cast<std::ptrdiff_t>(end), neg_inf);
      continue;
    }
    if (end - w * 64 < 64) {
      for (size_t t = w * 64; t < end; ++t) {
        if (!((bits >> (t % 64)) & 1)) logits[t] = neg_inf;
      }
      continue;
    }
    ApplyMixedWord(logits.data() + w * 64, bits);
  }
  std::fill(logits.begin() + static_cast<std::ptrdiff_t>(covered), logits.end(), neg_inf);
}

bool Matcher::Advance(int32_t token) {
  if (token < 0 || token >= c_->tokens().vocab_size()) return false;
  const std::string& bytes = c_->tokens().bytes(token);
  if (bytes.empty()) return false;
  return c_->Walk(pos_, bytes);
}

size_t Matcher::AllowedPrefix(std::span<const int32_t> tokens,
                              std::span<const int32_t> stop_ids) const {
  Position pos = pos_;
  if (c_->Dead(pos)) return 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    if (std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end()) {
      return c_->Accepting(pos) ? i + 1 : i;
    }
    if (t < 0 || t >= c_->tokens().vocab_size() || c_->tokens().bytes(t).empty()) return i;
    if (!c_->Walk(pos, c_->tokens().bytes(t))) return i;
  }
  return tokens.size();
}

bool Matcher::complete() const { return c_->Accepting(pos_); }

}  // namespace llm::constraint
