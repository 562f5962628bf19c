#include "worker/frontend/chat/jinja_parser.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace llm::frontend::jinja {

namespace {

using T = Token::Type;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  absl::StatusOr<Body> Run() {
    std::string end;
    Body body = ParseBody({}, &end);
    if (!error_.ok()) return error_;
    return body;
  }

 private:
  const Token& Cur() const { return t_[std::min(i_, t_.size() - 1)]; }
  const Token& Peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool IsOp(const char* op) const { return Cur().type == T::kOp && Cur().value == op; }
  bool IsName(const char* n) const { return Cur().type == T::kName && Cur().value == n; }
  bool SkipOp(const char* op) {
    if (!IsOp(op)) return false;
    ++i_;
    return true;
  }
  bool SkipName(const char* n) {
    if (!IsName(n)) return false;
    ++i_;
    return true;
  }
  static std::string Describe(const Token& t) {
    switch (t.type) {
      case T::kBlockEnd:
        return "end of statement block";
      case T::kVarEnd:
        return "end of print statement";
      case T::kEnd:
        return "end of template";
      case T::kString:
        return "string";
      default:
        return "'" + t.value + "'";
    }
  }
  void Fail(const std::string& what) {
    if (error_.ok()) {
      error_ =
          absl::InvalidArgumentError(absl::StrCat("chat template line ", Cur().line, ": ", what));
    }
  }
  bool Expect(T type, const std::string& what) {
    if (Cur().type == type) {
      ++i_;
      return true;
    }
    Fail(absl::StrCat("expected ", what, ", got ", Describe(Cur())));
    return false;
  }
  bool ExpectOp(const char* op) {
    if (SkipOp(op)) return true;
    Fail(absl::StrCat("expected '", op, "', got ", Describe(Cur())));
    return false;
  }
  std::string ExpectName() {
    if (Cur().type != T::kName) {
      Fail(absl::StrCat("expected a name, got ", Describe(Cur())));
      return "";
    }
    return t_[i_++].value;
  }

  ExprPtr Make(Expr::Kind k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = Cur().line;
    return e;
  }

  // Rendering and destroying a template recurse over its expressions and blocks, so both are
  // bounded here, far above anything jinja2 itself can parse (Python's recursion limit stops it
  // near 100 nested parentheses): 100,000 nested '(' or '{% if %}' overflowed the stack.
  static constexpr int kMaxNesting = 512;     // parser recursion: brackets, blocks, unary ops
  static constexpr int kMaxExprHeight = 512;  // an expression tree's levels, chains included

  // Makes `child` (may be null: an absent part) the last of parent's items.
  void Adopt(Expr* parent, ExprPtr child) {
    Grow(parent, child.get());
    parent->items.push_back(std::move(child));
  }
  void Grow(Expr* parent, const Expr* child) {
    if (child == nullptr) return;
    parent->height = std::max(parent->height, child->height + 1);
    if (parent->height > kMaxExprHeight) {
      Fail(absl::StrCat("expression nested more than ", kMaxExprHeight, " levels deep"));
    }
  }

  // One level of parser recursion for the scope it lives in; past kMaxNesting, the parse fails.
  class Nest {
   public:
    explicit Nest(Parser* p) : p_(p) {
      if (++p_->nesting_ > kMaxNesting) {
        p_->Fail(absl::StrCat("nested more than ", kMaxNesting, " levels deep"));
      }
    }
    ~Nest() { --p_->nesting_; }
    bool too_deep() const { return p_->nesting_ > kMaxNesting; }

   private:
    Parser* p_;
  };

  // ---- Statements ----

  // Statements until a block tag named in `ends` (left unconsumed; its name in *end) or the
  // end of the template (allowed only when `ends` is empty).
  Body ParseBody(std::initializer_list<const char*> ends, std::string* end) {
    Body body;
    while (error_.ok()) {
      const Token& tok = Cur();
      if (tok.type == T::kEnd) {
        if (ends.size() != 0) {
          std::vector<std::string> names(ends.begin(), ends.end());
          Fail(absl::StrCat("unexpected end of template; expected '",
                            absl::StrJoin(names, "' or '"), "'"));
        }
        return body;
      }
      if (tok.type == T::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->line = tok.line;
        s->text = tok.value;
        body.push_back(std::move(s));
        ++i_;
        continue;
      }
      if (tok.type == T::kVarBegin) {
        ++i_;
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kPrint;
        s->line = Cur().line;
        s->expr = ParseTuple(true);
        Expect(T::kVarEnd, "'}}'");
        body.push_back(std::move(s));
        continue;
      }
      if (tok.type != T::kBlockBegin) {
        Fail("unexpected " + Describe(tok));
        return body;
      }
      const Token& name = Peek();
      for (const char* e : ends) {
        if (name.type == T::kName && name.value == e) {
          *end = e;
          ++i_;  // at the tag's name
          return body;
        }
      }
      ++i_;
      StmtPtr s = ParseStatement();
      if (s != nullptr) body.push_back(std::move(s));
    }
    return body;
  }

  StmtPtr ParseStatement() {
    const Nest nest(this);
    if (nest.too_deep()) return nullptr;
    const int line = Cur().line;
    const std::string tag = ExpectName();
    if (!error_.ok()) return nullptr;
    auto s = std::make_unique<Stmt>();
    s->line = line;
    if (tag == "if") return ParseIf(std::move(s));
    if (tag == "for") return ParseFor(std::move(s));
    if (tag == "set") return ParseSet(std::move(s));
    if (tag == "macro") return ParseMacro(std::move(s));
    if (tag == "generation") {
      // transformers' AssistantTracker: {% generation %}...{% endgeneration %} marks the
      // assistant's tokens and renders its body unchanged; here, an if without a condition.
      s->kind = Stmt::Kind::kIf;
      Expect(T::kBlockEnd, "'%}'");
      std::string end;
      Body b = ParseBody({"endgeneration"}, &end);
      ++i_;
      Expect(T::kBlockEnd, "'%}'");
      s->branches.emplace_back(nullptr, std::move(b));
      return s;
    }
    if (tag == "break" || tag == "continue") {
      s->kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      Expect(T::kBlockEnd, "'%}'");
      return s;
    }
    i_ -= 1;
    Fail(absl::StrCat("unknown tag '", tag, "'"));
    return nullptr;
  }

  // {% if c %}...{% elif c %}...{% else %}...{% endif %}, after the tag's name.
  StmtPtr ParseIf(StmtPtr s) {
    s->kind = Stmt::Kind::kIf;
    ExprPtr cond = ParseTuple(true);
    Expect(T::kBlockEnd, "'%}'");
    std::string end;
    for (;;) {
      Body b = ParseBody({"elif", "else", "endif"}, &end);
      s->branches.emplace_back(std::move(cond), std::move(b));
      if (!error_.ok()) return nullptr;
      ++i_;  // the tag's name
      if (end == "elif") {
        cond = ParseTuple(true);
        Expect(T::kBlockEnd, "'%}'");
        continue;
      }
      if (end == "else") {
        Expect(T::kBlockEnd, "'%}'");
        Body e = ParseBody({"endif"}, &end);
        s->branches.emplace_back(nullptr, std::move(e));
        ++i_;
      }
      Expect(T::kBlockEnd, "'%}'");
      return s;
    }
  }

  // {% for targets in expr [if filter] %}...[{% else %}...]{% endfor %}, after the tag's name.
  StmtPtr ParseFor(StmtPtr s) {
    s->kind = Stmt::Kind::kFor;
    s->targets = ParseTargets();
    if (!SkipName("in")) {
      Fail(absl::StrCat("expected 'in', got ", Describe(Cur())));
      return nullptr;
    }
    s->expr = ParseTuple(false);
    if (SkipName("if")) s->filter = ParseTuple(true);
    if (IsName("recursive")) {
      Fail("recursive loops are not supported");
      return nullptr;
    }
    Expect(T::kBlockEnd, "'%}'");
    std::string end;
    s->body = ParseBody({"else", "endfor"}, &end);
    if (!error_.ok()) return nullptr;
    ++i_;
    if (end == "else") {
      Expect(T::kBlockEnd, "'%}'");
      s->else_body = ParseBody({"endfor"}, &end);
      ++i_;
    }
    Expect(T::kBlockEnd, "'%}'");
    return s;
  }

  // {% set a = e %}, {% set a, b = e %}, {% set ns.attr = e %}, or a block
  // {% set a %}...{% endset %}, after the tag's name.
  StmtPtr ParseSet(StmtPtr s) {
    const std::string first = ExpectName();
    s->targets.push_back(first);
    if (SkipOp(".")) {
      s->attr = ExpectName();
    } else {
      while (SkipOp(",")) s->targets.push_back(ExpectName());
    }
    if (SkipOp("=")) {
      s->kind = Stmt::Kind::kSet;
      s->expr = ParseTuple(true);
      Expect(T::kBlockEnd, "'%}'");
      return s;
    }
    if (!s->attr.empty() || s->targets.size() != 1) {
      Fail("expected '='");
      return nullptr;
    }
    s->kind = Stmt::Kind::kSetBlock;
    Expect(T::kBlockEnd, "'%}'");
    std::string end;
    s->body = ParseBody({"endset"}, &end);
    ++i_;
    Expect(T::kBlockEnd, "'%}'");
    return s;
  }

  // {% macro name(p, q=default) %}...{% endmacro [name] %}, after the tag's name.
  StmtPtr ParseMacro(StmtPtr s) {
    s->kind = Stmt::Kind::kMacro;
    s->name = ExpectName();
    ExpectOp("(");
    while (error_.ok() && !IsOp(")")) {
      std::string p = ExpectName();
      ExprPtr def;
      if (SkipOp("=")) def = ParseExpression();
      s->params.emplace_back(std::move(p), std::move(def));
      if (!SkipOp(",")) break;
    }
    ExpectOp(")");
    Expect(T::kBlockEnd, "'%}'");
    std::string end;
    s->body = ParseBody({"endmacro"}, &end);
    ++i_;
    if (Cur().type == T::kName) ++i_;  // {% endmacro name %}
    Expect(T::kBlockEnd, "'%}'");
    return s;
  }

  std::vector<std::string> ParseTargets() {
    std::vector<std::string> names;
    const bool paren = SkipOp("(");
    names.push_back(ExpectName());
    while (SkipOp(",")) {
      if (IsName("in") || IsOp(")")) break;
      names.push_back(ExpectName());
    }
    if (paren) ExpectOp(")");
    return names;
  }

  // ---- Expressions ----

  // An expression, or a tuple of them without parentheses (a, b).
  ExprPtr ParseTuple(bool with_condexpr) {
    ExprPtr first = with_condexpr ? ParseExpression() : ParseOr();
    if (!IsOp(",")) return first;
    auto tuple = Make(Expr::Kind::kList);
    tuple->name = "tuple";
    Adopt(tuple.get(), std::move(first));
    while (SkipOp(",")) {
      if (Cur().type == T::kBlockEnd || Cur().type == T::kVarEnd || IsOp(")")) break;
      Adopt(tuple.get(), with_condexpr ? ParseExpression() : ParseOr());
    }
    return tuple;
  }

  ExprPtr ParseExpression() {
    const Nest nest(this);
    if (nest.too_deep()) return nullptr;
    ExprPtr e = ParseOr();
    while (error_.ok() && IsName("if")) {
      ++i_;
      auto c = Make(Expr::Kind::kCond);
      ExprPtr cond = ParseOr();
      ExprPtr other;
      if (SkipName("else")) other = ParseExpression();
      Adopt(c.get(), std::move(cond));
      Adopt(c.get(), std::move(e));
      Adopt(c.get(), std::move(other));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr Binary(const std::string& op, ExprPtr l, ExprPtr r) {
    auto b = Make(Expr::Kind::kBinary);
    b->name = op;
    Adopt(b.get(), std::move(l));
    Adopt(b.get(), std::move(r));
    return b;
  }

  ExprPtr ParseOr() {
    ExprPtr l = ParseAnd();
    while (error_.ok() && SkipName("or")) l = Binary("or", std::move(l), ParseAnd());
    return l;
  }
  ExprPtr ParseAnd() {
    ExprPtr l = ParseNot();
    while (error_.ok() && SkipName("and")) l = Binary("and", std::move(l), ParseNot());
    return l;
  }
  ExprPtr ParseNot() {
    const Nest nest(this);
    if (nest.too_deep()) return nullptr;
    if (SkipName("not")) {
      auto u = Make(Expr::Kind::kUnary);
      u->name = "not";
      Adopt(u.get(), ParseNot());
      return u;
    }
    return ParseCompare();
  }
  ExprPtr ParseCompare() {
    // One comparison is a binary node; a chain (a < b < c) is one node holding every operand
    // once (parsing the middle ones twice made nested chains exponential).
    ExprPtr first = ParseMath1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> operands;
    for (;;) {
      std::string op;
      if (Cur().type == T::kOp &&
          (Cur().value == "==" || Cur().value == "!=" || Cur().value == "<" || Cur().value == ">" ||
           Cur().value == "<=" || Cur().value == ">=")) {
        op = Cur().value;
        ++i_;
      } else if (IsName("in")) {
        op = "in";
        ++i_;
      } else if (IsName("not") && Peek().type == T::kName && Peek().value == "in") {
        op = "not in";
        i_ += 2;
      } else {
        break;
      }
      ops.push_back(op);
      operands.push_back(ParseMath1());
      if (!error_.ok()) return nullptr;
    }
    if (ops.empty()) return first;
    if (ops.size() == 1) return Binary(ops[0], std::move(first), std::move(operands[0]));
    auto c = Make(Expr::Kind::kCompareChain);
    Adopt(c.get(), std::move(first));
    for (ExprPtr& operand : operands) Adopt(c.get(), std::move(operand));
    c->ops = std::move(ops);
    return c;
  }
  ExprPtr ParseMath1() {
    ExprPtr l = ParseConcat();
    while (error_.ok() && (IsOp("+") || IsOp("-"))) {
      const std::string op = t_[i_++].value;
      l = Binary(op, std::move(l), ParseConcat());
    }
    return l;
  }
  ExprPtr ParseConcat() {
    ExprPtr l = ParseMath2();
    while (error_.ok() && SkipOp("~")) l = Binary("~", std::move(l), ParseMath2());
    return l;
  }
  ExprPtr ParseMath2() {
    ExprPtr l = ParsePow();
    while (error_.ok() && (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%"))) {
      const std::string op = t_[i_++].value;
      l = Binary(op, std::move(l), ParsePow());
    }
    return l;
  }
  ExprPtr ParsePow() {
    ExprPtr l = ParseUnary(true);
    while (error_.ok() && SkipOp("**")) l = Binary("**", std::move(l), ParseUnary(true));
    return l;
  }
  ExprPtr ParseUnary(bool with_filter) {
    const Nest nest(this);
    if (nest.too_deep()) return nullptr;
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      auto u = Make(Expr::Kind::kUnary);
      u->name = t_[i_++].value;
      Adopt(u.get(), ParseUnary(false));
      e = std::move(u);
    } else {
      e = ParsePrimary();
    }
    e = ParsePostfix(std::move(e));
    if (with_filter) e = ParseFilterExpr(std::move(e));
    return e;
  }

  // A literal or a name: true/false/none (either case), a name, adjacent strings joined, an
  // int (an error past 64 bits), a float. Null when the current token is none of those.
  ExprPtr ParseAtom() {
    const Token& tok = Cur();
    auto e = Make(Expr::Kind::kLiteral);
    switch (tok.type) {
      case T::kName: {
        ++i_;
        const std::string& n = tok.value;
        if (n == "true" || n == "True") {
          e->value = Value::Bool(true);
        } else if (n == "false" || n == "False") {
          e->value = Value::Bool(false);
        } else if (n == "none" || n == "None") {
          e->value = Value::None();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = n;
        }
        return e;
      }
      case T::kString: {
        std::string s;
        while (Cur().type == T::kString) s += t_[i_++].value;  // adjacent literals join
        e->value = Value::Str(std::move(s));
        return e;
      }
      case T::kInt:
        ++i_;
        errno = 0;
        e->value = Value::Int(std::strtoll(tok.value.c_str(), nullptr, 10));
        if (errno == ERANGE) {  // strtoll saturates: 9223372036854775808 read as 2^63 - 1
          Fail(absl::StrCat("integer ", tok.value, " does not fit in 64 bits"));
        }
        return e;
      case T::kFloat:
        ++i_;
        e->value = Value::Float(std::strtod(tok.value.c_str(), nullptr));
        return e;
      default:
        return nullptr;
    }
  }

  // After "(": (), (e), or a tuple (a, b[,]).
  ExprPtr ParseParenthesised() {
    if (SkipOp(")")) {
      auto t = Make(Expr::Kind::kList);
      t->name = "tuple";
      return t;
    }
    ExprPtr inner = ParseExpression();
    if (IsOp(",")) {
      auto t = Make(Expr::Kind::kList);
      t->name = "tuple";
      Adopt(t.get(), std::move(inner));
      while (SkipOp(",")) {
        if (IsOp(")")) break;
        Adopt(t.get(), ParseExpression());
      }
      inner = std::move(t);
    }
    ExpectOp(")");
    return inner;
  }

  ExprPtr ParsePrimary() {
    if (ExprPtr atom = ParseAtom()) return atom;
    if (SkipOp("(")) return ParseParenthesised();
    if (SkipOp("[")) {
      auto l = Make(Expr::Kind::kList);
      while (error_.ok() && !IsOp("]")) {
        Adopt(l.get(), ParseExpression());
        if (!SkipOp(",")) break;
      }
      ExpectOp("]");
      return l;
    }
    if (SkipOp("{")) {
      auto d = Make(Expr::Kind::kDict);
      while (error_.ok() && !IsOp("}")) {
        Adopt(d.get(), ParseExpression());
        ExpectOp(":");
        Adopt(d.get(), ParseExpression());
        if (!SkipOp(",")) break;
      }
      ExpectOp("}");
      return d;
    }
    auto e = Make(Expr::Kind::kLiteral);
    Fail("unexpected " + Describe(Cur()));
    ++i_;
    return e;
  }

  ExprPtr ParsePostfix(ExprPtr e) {
    while (error_.ok()) {
      if (SkipOp(".")) {
        if (Cur().type == T::kInt) {
          auto idx = Make(Expr::Kind::kIndex);
          auto lit = Make(Expr::Kind::kLiteral);
          lit->value = Value::Int(std::strtoll(t_[i_++].value.c_str(), nullptr, 10));
          Adopt(idx.get(), std::move(e));
          Adopt(idx.get(), std::move(lit));
          e = std::move(idx);
          continue;
        }
        auto a = Make(Expr::Kind::kAttr);
        a->name = ExpectName();
        Adopt(a.get(), std::move(e));
        e = std::move(a);
      } else if (SkipOp("[")) {
        e = ParseSubscript(std::move(e));
      } else if (IsOp("(")) {
        e = ParseCall(std::move(e));
      } else {
        break;
      }
    }
    return e;
  }

  ExprPtr ParseSubscript(ExprPtr target) {
    ExprPtr parts[3];
    bool slice = false;
    if (!IsOp(":")) parts[0] = ParseExpression();
    if (SkipOp(":")) {
      slice = true;
      if (!IsOp(":") && !IsOp("]")) parts[1] = ParseExpression();
      if (SkipOp(":") && !IsOp("]")) parts[2] = ParseExpression();
    }
    ExpectOp("]");
    auto e = Make(slice ? Expr::Kind::kSlice : Expr::Kind::kIndex);
    Adopt(e.get(), std::move(target));
    Adopt(e.get(), std::move(parts[0]));
    if (slice) {
      Adopt(e.get(), std::move(parts[1]));
      Adopt(e.get(), std::move(parts[2]));
    }
    return e;
  }

  // `(` args `)` into e (items after the first, and kwargs).
  void ParseArgs(Expr* e) {
    ExpectOp("(");
    while (error_.ok() && !IsOp(")")) {
      if (Cur().type == T::kName && Peek().type == T::kOp && Peek().value == "=") {
        std::string k = t_[i_].value;
        i_ += 2;
        ExprPtr v = ParseExpression();
        Grow(e, v.get());
        e->kwargs.emplace_back(std::move(k), std::move(v));
      } else {
        Adopt(e, ParseExpression());
      }
      if (!SkipOp(",")) break;
    }
    ExpectOp(")");
  }

  ExprPtr ParseCall(ExprPtr fn) {
    auto c = Make(Expr::Kind::kCall);
    Adopt(c.get(), std::move(fn));
    ParseArgs(c.get());
    return c;
  }

  ExprPtr ParseFilterExpr(ExprPtr e) {
    while (error_.ok()) {
      if (SkipOp("|")) {
        auto f = Make(Expr::Kind::kFilter);
        f->name = ExpectName();
        while (SkipOp(".")) f->name += "." + ExpectName();
        Adopt(f.get(), std::move(e));
        if (IsOp("(")) ParseArgs(f.get());
        e = std::move(f);
      } else if (SkipName("is")) {
        auto t = Make(Expr::Kind::kTest);
        t->negated = SkipName("not");
        t->name = ExpectName();
        Adopt(t.get(), std::move(e));
        if (IsOp("(")) {
          ParseArgs(t.get());
        } else if ((Cur().type == T::kName && Cur().value != "else" && Cur().value != "or" &&
                    Cur().value != "and" && Cur().value != "if") ||
                   Cur().type == T::kString || Cur().type == T::kInt || Cur().type == T::kFloat ||
                   IsOp("[") || IsOp("{")) {
          Adopt(t.get(), ParsePostfix(ParsePrimary()));
        }
        e = std::move(t);
      } else if (IsOp("(")) {
        e = ParseCall(std::move(e));
      } else {
        break;
      }
    }
    return e;
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int nesting_ = 0;  // Nest levels open
  absl::Status error_;
};

}  // namespace

absl::StatusOr<Body> Parse(const std::vector<Token>& tokens) { return Parser(tokens).Run(); }

}  // namespace llm::frontend::jinja
