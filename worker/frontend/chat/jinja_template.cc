#include "worker/frontend/chat/jinja_template.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "worker/frontend/chat/jinja_arithmetic.h"
#include "worker/frontend/chat/jinja_builtins.h"
#include "worker/frontend/chat/jinja_format.h"
#include "worker/frontend/chat/jinja_text_filters.h"

namespace llm::frontend::jinja {

namespace {

using K = Value::Kind;

// Names a template refers to that are filters and tests: unknown ones fail at parse time, as
// in jinja2.
absl::Status CheckNames(const Expr* e) {
  if (e == nullptr) return absl::OkStatus();
  if (e->kind == Expr::Kind::kFilter && !HasFilter(e->name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template line ", e->line, ": no filter named '", e->name, "'"));
  }
  if (e->kind == Expr::Kind::kTest && !HasTest(e->name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template line ", e->line, ": no test named '", e->name, "'"));
  }
  for (const auto& c : e->items) {
    if (absl::Status st = CheckNames(c.get()); !st.ok()) return st;
  }
  for (const auto& [k, c] : e->kwargs) {
    if (absl::Status st = CheckNames(c.get()); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status CheckNames(const Body& body) {
  for (const auto& s : body) {
    for (const Expr* e : {s->expr.get(), s->filter.get()}) {
      if (absl::Status st = CheckNames(e); !st.ok()) return st;
    }
    for (const auto& [cond, b] : s->branches) {
      if (absl::Status st = CheckNames(cond.get()); !st.ok()) return st;
      if (absl::Status st = CheckNames(b); !st.ok()) return st;
    }
    for (const auto& [n, def] : s->params) {
      if (absl::Status st = CheckNames(def.get()); !st.ok()) return st;
    }
    for (const Body* b : {&s->body, &s->else_body}) {
      if (absl::Status st = CheckNames(*b); !st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

bool UsesName(const Expr* e, const std::string& name) {
  if (e == nullptr) return false;
  if (e->kind == Expr::Kind::kName && e->name == name) return true;
  for (const auto& c : e->items) {
    if (UsesName(c.get(), name)) return true;
  }
  for (const auto& [k, c] : e->kwargs) {
    if (UsesName(c.get(), name)) return true;
  }
  return false;
}

// Whether a body reads the variable `name` (nested macros included, as jinja2 sees it).
bool UsesName(const Body& body, const std::string& name) {
  for (const auto& s : body) {
    if (UsesName(s->expr.get(), name) || UsesName(s->filter.get(), name)) return true;
    for (const auto& [cond, b] : s->branches) {
      if (UsesName(cond.get(), name) || UsesName(b, name)) return true;
    }
    for (const auto& [n, def] : s->params) {
      if (UsesName(def.get(), name)) return true;
    }
    if (UsesName(s->body, name) || UsesName(s->else_body, name)) return true;
  }
  return false;
}

struct Scope {
  Dict vars;
  Value* Find(const std::string& name) {
    for (auto& [k, v] : vars) {
      if (k == name) return &v;
    }
    return nullptr;
  }
  void Set(const std::string& name, Value v) {
    if (Value* x = Find(name)) {
      *x = std::move(v);
    } else {
      vars.emplace_back(name, std::move(v));
    }
  }
};

class Renderer {
 public:
  Renderer(const RenderOptions& options, Dict globals) : options_(options) {
    globals_.vars = std::move(globals);
  }

  absl::StatusOr<std::string> Run(const Body& body) {
    std::string out;
    std::vector<Scope*> chain = {&globals_, &top_};
    Exec(body, chain, &out);
    if (!error_.ok()) return error_;
    return out;
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  bool Failed() const { return !error_.ok(); }
  void Fail(int line, const absl::Status& st) {
    if (!error_.ok()) return;
    if (st.GetPayload(kRaisedPayload).has_value() ||
        st.code() != absl::StatusCode::kInvalidArgument ||
        absl::StartsWith(st.message(), "chat template line")) {
      error_ = st;
      return;
    }
    error_ =
        absl::InvalidArgumentError(absl::StrCat("chat template line ", line, ": ", st.message()));
  }
  void Fail(int line, const std::string& what) { Fail(line, absl::InvalidArgumentError(what)); }

  Value Lookup(const std::string& name, const std::vector<Scope*>& chain) {
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      if (Value* v = (*it)->Find(name)) return *v;
    }
    return Value::Undefined(absl::StrCat("'", name, "' is undefined"));
  }

  void Append(std::string* out, const std::string& s) {
    if (out->size() + s.size() > options_.max_output_bytes) {
      if (error_.ok()) {
        error_ = absl::ResourceExhaustedError(absl::StrCat("chat template: the output exceeds ",
                                                           options_.max_output_bytes, " bytes"));
      }
      return;
    }
    *out += s;
  }

  // ---- Statements ----

  Flow Exec(const Body& body, std::vector<Scope*>& chain, std::string* out) {
    for (const auto& s : body) {
      if (Failed()) return Flow::kNormal;
      const Flow f = Exec(*s, chain, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow Exec(const Stmt& s, std::vector<Scope*>& chain, std::string* out) {
    const Deeper deeper(this, s.line);
    if (Failed()) return Flow::kNormal;
    switch (s.kind) {
      case Stmt::Kind::kText:
        Append(out, s.text);
        return Flow::kNormal;
      case Stmt::Kind::kPrint: {
        const Value v = Eval(*s.expr, chain);
        if (!Failed()) Append(out, ToStr(v));
        return Flow::kNormal;
      }
      case Stmt::Kind::kIf:
        for (const auto& [cond, body] : s.branches) {
          if (cond == nullptr || Truthy(Eval(*cond, chain))) {
            if (Failed()) return Flow::kNormal;
            return Exec(body, chain, out);
          }
          if (Failed()) return Flow::kNormal;
        }
        return Flow::kNormal;
      case Stmt::Kind::kFor:
        ExecFor(s, chain, out);
        return Flow::kNormal;
      case Stmt::Kind::kSet: {
        Value v = Eval(*s.expr, chain);
        if (Failed()) return Flow::kNormal;
        if (!s.attr.empty()) {
          const Value ns = Lookup(s.targets[0], chain);
          if (ns.kind != K::kNamespace) {
            Fail(s.line, absl::StrCat("cannot assign attribute on non-namespace object '",
                                      s.targets[0], "'"));
            return Flow::kNormal;
          }
          Scope tmp{ns.ns->attrs};
          tmp.Set(s.attr, std::move(v));
          ns.ns->attrs = std::move(tmp.vars);
          return Flow::kNormal;
        }
        Assign(s.targets, std::move(v), chain.back(), s.line);
        return Flow::kNormal;
      }
      case Stmt::Kind::kSetBlock: {
        std::string captured;
        Exec(s.body, chain, &captured);
        chain.back()->Set(s.targets[0], Value::Str(std::move(captured)));
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro:
        chain.back()->Set(s.name, MakeMacro(s, chain));
        return Flow::kNormal;
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  void Assign(const std::vector<std::string>& targets, Value v, Scope* scope, int line) {
    if (targets.size() == 1) {
      scope->Set(targets[0], std::move(v));
      return;
    }
    auto items = Iterate(v);
    if (!items.ok()) return Fail(line, items.status());
    if (items->size() != targets.size()) {
      return Fail(line, absl::StrCat("cannot unpack ", items->size(), " values into ",
                                     targets.size(), " names"));
    }
    for (size_t i = 0; i < targets.size(); ++i) scope->Set(targets[i], (*items)[i]);
  }

  void ExecFor(const Stmt& s, std::vector<Scope*>& chain, std::string* out) {
    const Value seq = Eval(*s.expr, chain);
    if (Failed()) return;
    auto all = Iterate(seq);
    if (!all.ok()) return Fail(s.line, all.status());
    Scope scope;
    chain.push_back(&scope);
    // `for x in xs if cond`: the items kept, so that loop.last and loop.length count them only.
    List items;
    if (s.filter != nullptr) {
      for (const Value& item : *all) {
        Assign(s.targets, item, &scope, s.line);
        const bool keep = Truthy(Eval(*s.filter, chain));
        if (Failed()) break;
        if (keep) items.push_back(item);
      }
    } else {
      items = *std::move(all);
    }
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n && !Failed(); ++i) {
      if (++iterations_ > options_.max_loop_iterations) {
        error_ = absl::ResourceExhaustedError(
            absl::StrCat("chat template line ", s.line, ": more than ",
                         options_.max_loop_iterations, " loop iterations"));
        break;
      }
      // Each iteration starts from the enclosing scope: what the last one set is gone (jinja2).
      scope.vars.clear();
      Assign(s.targets, items[static_cast<size_t>(i)], &scope, s.line);
      Dict loop = {{"index", Value::Int(i + 1)},
                   {"index0", Value::Int(i)},
                   {"revindex", Value::Int(n - i)},
                   {"revindex0", Value::Int(n - i - 1)},
                   {"first", Value::Bool(i == 0)},
                   {"last", Value::Bool(i == n - 1)},
                   {"length", Value::Int(n)},
                   {"depth", Value::Int(1)},
                   {"depth0", Value::Int(0)},
                   {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)]
                                      : Value::Undefined("there is no previous item")},
                   {"nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)]
                                          : Value::Undefined("there is no next item")}};
      loop.emplace_back("cycle", Value::MakeFunction([i](Args& a) -> absl::StatusOr<Value> {
                          if (a.pos.empty()) {
                            return absl::InvalidArgumentError("no items for cycling given");
                          }
                          return a.pos[static_cast<size_t>(i) % a.pos.size()];
                        }));
      scope.Set("loop", Value::MakeDict(std::move(loop)));
      if (Exec(s.body, chain, out) == Flow::kBreak) break;
    }
    chain.pop_back();
    if (n == 0 && !Failed()) Exec(s.else_body, chain, out);
  }

  Value MakeMacro(const Stmt& s, const std::vector<Scope*>& chain) {
    // A macro sees its arguments, then the template's top level and the globals.
    const Stmt* def = &s;
    std::vector<Scope*> outer = {chain[0], chain[1]};
    // As in jinja2, a macro takes extra positional (keyword) arguments only when its body
    // reads `varargs` (`kwargs`).
    const bool takes_varargs = UsesName(s.body, "varargs");
    const bool takes_kwargs = UsesName(s.body, "kwargs");
    return Value::MakeFunction(
        [this, def, outer, takes_varargs, takes_kwargs](Args& args) -> absl::StatusOr<Value> {
          List extra;
          for (size_t i = def->params.size(); i < args.pos.size(); ++i) {
            extra.push_back(args.pos[i]);
          }
          if (!extra.empty() && !takes_varargs) {
            return absl::InvalidArgumentError(absl::StrCat("macro '", def->name,
                                                           "' takes not more than ",
                                                           def->params.size(), " argument(s)"));
          }
          if (++depth_ > options_.max_recursion_depth) {
            --depth_;
            return absl::ResourceExhaustedError(
                absl::StrCat("chat template line ", def->line, ": macro calls nested more than ",
                             options_.max_recursion_depth, " deep"));
          }
          Scope scope;
          for (size_t i = 0; i < def->params.size(); ++i) {
            const auto& [name, default_expr] = def->params[i];
            auto given = args.Take(i, name);
            if (given) {
              scope.Set(name, *given);
            } else if (default_expr != nullptr) {
              std::vector<Scope*> c = outer;
              scope.Set(name, Eval(*default_expr, c));
            } else {
              scope.Set(name, Value::Undefined(absl::StrCat("'", name, "' is undefined")));
            }
          }
          if (!args.kw.empty() && !takes_kwargs) {
            return absl::InvalidArgumentError(absl::StrCat(
                "macro '", def->name, "' takes no keyword argument '", args.kw[0].first, "'"));
          }
          if (takes_varargs) scope.Set("varargs", Value::MakeList(std::move(extra), true));
          if (takes_kwargs) scope.Set("kwargs", Value::MakeDict(std::move(args.kw)));
          std::vector<Scope*> c = outer;
          c.push_back(&scope);
          std::string out;
          Exec(def->body, c, &out);
          --depth_;
          if (Failed()) return error_;
          return Value::Str(std::move(out));
        },
        /*macro=*/true);
  }

  // ---- Expressions ----

  Value Eval(const Expr& e, std::vector<Scope*>& chain) {
    if (Failed()) return Value();
    const Deeper deeper(this, e.line);
    if (Failed()) return Value();
    Value v = EvalNode(e, chain);
    if (v.depth > kMaxValueDepth) {
      Fail(e.line,
           absl::StrCat("a value nests more than ", kMaxValueDepth, " lists or dicts deep"));
      return Value();
    }
    return v;
  }

  Value EvalNode(const Expr& e, std::vector<Scope*>& chain) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.value;
      case Expr::Kind::kName:
        return Lookup(e.name, chain);
      case Expr::Kind::kList: {
        List l;
        for (const auto& x : e.items) l.push_back(Eval(*x, chain));
        return Value::MakeList(std::move(l), /*tuple=*/e.name == "tuple");
      }
      case Expr::Kind::kDict: {
        Scope d;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          const Value k = Eval(*e.items[i], chain);
          d.Set(ToStr(k), Eval(*e.items[i + 1], chain));
        }
        return Value::MakeDict(std::move(d.vars));
      }
      case Expr::Kind::kAttr: {
        auto r = GetAttr(Eval(*e.items[0], chain), e.name);
        if (!r.ok()) return Fail(e.line, r.status()), Value();
        return *r;
      }
      case Expr::Kind::kIndex: {
        const Value target = Eval(*e.items[0], chain);
        auto r = GetItem(target, Eval(*e.items[1], chain));
        if (!r.ok()) return Fail(e.line, r.status()), Value();
        return *r;
      }
      case Expr::Kind::kSlice:
        return Slice(e, chain);
      case Expr::Kind::kCall:
        return Call(e, chain);
      case Expr::Kind::kFilter: {
        const Value v = Eval(*e.items[0], chain);
        Args args = EvalArgs(e, chain);
        if (Failed()) return Value();
        auto r = ApplyFilter(e.name, v, args);
        if (!r.ok()) return Fail(e.line, r.status()), Value();
        return *r;
      }
      case Expr::Kind::kTest: {
        const Value v = Eval(*e.items[0], chain);
        Args args = EvalArgs(e, chain);
        if (Failed()) return Value();
        auto r = ApplyTest(e.name, v, args);
        if (!r.ok()) return Fail(e.line, r.status()), Value();
        return Value::Bool(*r != e.negated);
      }
      case Expr::Kind::kUnary: {
        const Value v = Eval(*e.items[0], chain);
        if (e.name == "not") return Value::Bool(!Truthy(v));
        if (v.kind == K::kInt) {
          if (e.name != "-") return v;
          return v.i == std::numeric_limits<int64_t>::min() ? Overflow(e.line) : Value::Int(-v.i);
        }
        if (v.kind == K::kFloat) return Value::Float(e.name == "-" ? -v.f : v.f);
        if (v.kind == K::kBool) return Value::Int(e.name == "-" ? -int64_t{v.b} : v.b);
        Fail(e.line, absl::StrCat("bad operand type for unary ", e.name, ": '", TypeName(v), "'"));
        return Value();
      }
      case Expr::Kind::kBinary:
        return Binary(e, chain);
      case Expr::Kind::kCompareChain:
        return CompareChain(e, chain);
      case Expr::Kind::kCond: {
        if (Truthy(Eval(*e.items[0], chain))) return Eval(*e.items[1], chain);
        if (e.items[2] == nullptr) return Value::Undefined("the condition was false");
        return Eval(*e.items[2], chain);
      }
    }
    return Value();
  }

  Args EvalArgs(const Expr& e, std::vector<Scope*>& chain) {
    Args a;
    for (size_t i = 1; i < e.items.size(); ++i) a.pos.push_back(Eval(*e.items[i], chain));
    for (const auto& [k, x] : e.kwargs) a.kw.emplace_back(k, Eval(*x, chain));
    return a;
  }

  Value Call(const Expr& e, std::vector<Scope*>& chain) {
    const Value fn = Eval(*e.items[0], chain);
    Args args = EvalArgs(e, chain);
    if (Failed()) return Value();
    if (fn.kind != K::kFunction) {
      if (fn.undefined()) {
        Fail(e.line, fn.s.empty() ? "calling an undefined value" : fn.s);
      } else {
        Fail(e.line, absl::StrCat("'", TypeName(fn), "' object is not callable"));
      }
      return Value();
    }
    auto r = (*fn.fn)(args);
    if (!r.ok()) return Fail(e.line, r.status()), Value();
    return *r;
  }

  Value Slice(const Expr& e, std::vector<Scope*>& chain) {
    const Value v = Eval(*e.items[0], chain);
    std::optional<int64_t> parts[3];
    for (int k = 0; k < 3; ++k) {
      if (e.items[k + 1] == nullptr) continue;
      const Value p = Eval(*e.items[k + 1], chain);
      if (!p.none()) parts[k] = p.i;
    }
    if (Failed()) return Value();
    std::vector<std::string> cps;
    const List* list = nullptr;
    if (v.is_string()) {
      cps = CodePoints(v.s);
    } else if (v.kind == K::kList) {
      list = v.list.get();
    } else {
      Fail(e.line, absl::StrCat("'", TypeName(v), "' object is not subscriptable"));
      return Value();
    }
    const int64_t n =
        list != nullptr ? static_cast<int64_t>(list->size()) : static_cast<int64_t>(cps.size());
    const int64_t step = parts[2].value_or(1);
    if (step == 0) {
      Fail(e.line, "slice step cannot be zero");
      return Value();
    }
    // Python's slice.indices.
    const auto clamp = [&](std::optional<int64_t> x, int64_t def) {
      if (!x) return def;
      int64_t i = *x;
      if (i < 0) i += n;
      if (step > 0) return std::clamp<int64_t>(i, 0, n);
      return std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t start = clamp(parts[0], step > 0 ? 0 : n - 1);
    const int64_t stop = clamp(parts[1], step > 0 ? n : -1);
    List out;
    std::string s;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (list != nullptr) {
        out.push_back((*list)[static_cast<size_t>(i)]);
      } else {
        s += cps[static_cast<size_t>(i)];
      }
    }
    return list != nullptr ? Value::MakeList(std::move(out), v.tuple) : Value::Str(std::move(s));
  }

  Value Binary(const Expr& e, std::vector<Scope*>& chain) {
    const std::string& op = e.name;
    const Value a = Eval(*e.items[0], chain);
    if (op == "and") return Truthy(a) ? Eval(*e.items[1], chain) : a;
    if (op == "or") return Truthy(a) ? a : Eval(*e.items[1], chain);
    const Value b = Eval(*e.items[1], chain);
    if (Failed()) return Value();
    return Apply(op, a, b, e.line);
  }

  // a < b < c: each operand evaluated once, left to right, stopping at the first false link (as
  // Python does).
  Value CompareChain(const Expr& e, std::vector<Scope*>& chain) {
    Value left = Eval(*e.items[0], chain);
    for (size_t i = 0; i < e.ops.size() && !Failed(); ++i) {
      Value right = Eval(*e.items[i + 1], chain);
      if (Failed()) break;
      Value link = Apply(e.ops[i], left, right, e.line);
      if (Failed() || !Truthy(link)) return link;
      left = std::move(right);
    }
    return Failed() ? Value() : Value::Bool(true);
  }

  // The binary operator `op` (not and/or) on values; arithmetic is jinja_arithmetic.h's.
  Value Apply(const std::string& op, const Value& a, const Value& b, int line) {
    if (op == "~") {
      std::string l = ToStr(a), r = ToStr(b);
      if (!FitsOutput(l.size() + r.size(), line)) return Value();
      return Value::Str(std::move(l) + r);
    }
    if (op == "==") return Value::Bool(Equal(a, b));
    if (op == "!=") return Value::Bool(!Equal(a, b));
    if (op == "in" || op == "not in") {
      Args args;
      args.pos.push_back(b);
      if (!(b.kind == K::kList || b.kind == K::kDict || b.is_string() || b.undefined())) {
        Fail(line, absl::StrCat("argument of type '", TypeName(b), "' is not iterable"));
        return Value();
      }
      if (b.is_string() && !a.is_string()) {
        Fail(line,
             absl::StrCat("'in <string>' requires string as left operand, not ", TypeName(a)));
        return Value();
      }
      auto r = ApplyTest("in", a, args);
      if (!r.ok()) return Fail(line, r.status()), Value();
      return Value::Bool(*r == (op == "in"));
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      auto c = Compare(a, b);
      if (!c.ok()) return Fail(line, c.status()), Value();
      if (op == "<") return Value::Bool(*c < 0);
      if (op == ">") return Value::Bool(*c > 0);
      if (op == "<=") return Value::Bool(*c <= 0);
      return Value::Bool(*c >= 0);
    }
    if (op == "%" && a.is_string()) {
      auto r = PercentFormat(a.s, b);
      if (!r.ok()) return Fail(line, r.status()), Value();
      return Value::Str(*std::move(r));
    }
    auto r = Arithmetic(op, a, b, line, options_.max_output_bytes);
    if (!r.ok()) return Fail(line, r.status()), Value();
    return *std::move(r);
  }

  // Rendering recurses (statements in statements, expressions in expressions, macro calls), and
  // the parser's bounds multiply with macro recursion: past kMaxRenderDepth levels the render
  // fails rather than overflow the stack (a 4-deep macro of 500 nested loops and a chain of
  // 1,000 filters did). Values a template builds are bounded too: a list wrapped in a list
  // 900,000 times overflowed the stack when it was freed.
  static constexpr int kMaxRenderDepth = 1024;
  static constexpr int kMaxValueDepth = 256;
  class Deeper {
   public:
    Deeper(Renderer* r, int line) : r_(r) {
      if (++r_->render_depth_ > kMaxRenderDepth && r_->error_.ok()) {
        r_->error_ = absl::ResourceExhaustedError(absl::StrCat("chat template line ", line,
                                                               ": rendering nests more than ",
                                                               kMaxRenderDepth, " levels deep"));
      }
    }
    ~Deeper() { --r_->render_depth_; }

   private:
    Renderer* r_;
  };

  // Python's integers have no bound; this engine's are 64 bits: past them is an error, never a
  // wrapped number (2 ** 64 gave 0).
  Value Overflow(int line) {
    Fail(line, "integer overflow: the result does not fit in 64 bits");
    return Value();
  }
  // Values built by joining (~, +) are bounded like the output: doubling a string or a list 40
  // times in a loop took gigabytes before the output bound was ever reached.
  bool FitsOutput(size_t bytes, int line) {
    if (bytes <= options_.max_output_bytes) return true;
    if (error_.ok()) {
      error_ = absl::ResourceExhaustedError(absl::StrCat(
          "chat template line ", line, ": a string exceeds ", options_.max_output_bytes, " bytes"));
    }
    return false;
  }

  const RenderOptions& options_;
  int render_depth_ = 0;  // Deeper levels open
  Scope globals_, top_;
  absl::Status error_;
  int64_t iterations_ = 0;
  int depth_ = 0;
};

}  // namespace

absl::StatusOr<Template> Template::Parse(std::string_view source) {
  auto tokens = Tokenize(source);
  if (!tokens.ok()) return tokens.status();
  auto body = jinja::Parse(*tokens);
  if (!body.ok()) return body.status();
  if (absl::Status st = CheckNames(*body); !st.ok()) return st;
  return Template(std::make_shared<const Body>(*std::move(body)));
}

absl::StatusOr<std::string> Template::Render(const nlohmann::ordered_json& context,
                                             const RenderOptions& options) const {
  Dict globals = Globals(options.today);
  if (context.is_object()) {
    for (const auto& [k, v] : context.items()) {
      bool replaced = false;
      for (auto& [gk, gv] : globals) {
        if (gk == k) {
          gv = FromJson(v);
          replaced = true;
        }
      }
      if (!replaced) globals.emplace_back(k, FromJson(v));
    }
  }
  Renderer r(options, std::move(globals));
  return r.Run(*body_);
}

}  // namespace llm::frontend::jinja
