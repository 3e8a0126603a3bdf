// Kernel IR parser: the cursor, name resolution, and index and float expressions (see parser_internal.h).
//
// Index expressions are rebuilt node for node as IndexExpr's printer wrote them (toString's precedences: `^ << >>`
// lowest with atom or parenthesized operands, then `+ -`, then `* floordiv mod`), without the constructors' folding,
// so that the parsed tree prints back to the same text.
#include <fmt/format.h>

#include <cctype>
#include <cstdlib>

#include "kiln/support/error.h"
#include "kiln/tensor/ir.h"
#include "parser_internal.h"

namespace kiln::kernel::parse_detail {
namespace {

bool wordChar(char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; }

Idx node(IndexNode::Op op, Idx a, Idx b) {
  auto n = std::make_shared<IndexNode>();
  n->op = op;
  n->a = std::move(a);
  n->b = std::move(b);
  return n;
}

Idx constant(int64_t v) {
  auto n = std::make_shared<IndexNode>();
  n->op = IndexNode::Op::Const;
  n->value = v;
  return n;
}

}  // namespace

void Cursor::fail(const std::string& what, size_t col) const {
  throw UserError(fmt::format("{}:{}:{}: {}", file_, line_, col ? col : pos_ + 1, what));
}

void Cursor::skipBlanks() {
  while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
}

bool Cursor::atEnd() {
  skipBlanks();
  return pos_ >= text_.size();
}

bool Cursor::startsWith(std::string_view literal) {
  skipBlanks();
  return text_.substr(pos_).substr(0, literal.size()) == literal;
}

bool Cursor::accept(std::string_view literal) {
  if (!startsWith(literal)) return false;
  pos_ += literal.size();
  return true;
}

bool Cursor::acceptWord(std::string_view w) {
  if (!startsWith(w)) return false;
  size_t end = pos_ + w.size();
  if (end < text_.size() && wordChar(text_[end])) return false;
  pos_ = end;
  return true;
}

void Cursor::expect(std::string_view literal) {
  if (accept(literal)) return;
  std::string_view found = rest().substr(0, 24);
  fail(fmt::format("expected '{}', found '{}'", literal, found.empty() ? "end of line" : printable(std::string(found))));
}

int64_t Cursor::integer() {
  skipBlanks();
  size_t start = pos_;
  if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
  size_t digits = pos_;
  while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  if (pos_ == digits) {
    pos_ = start;
    fail("expected an integer");
  }
  try {
    return std::stoll(std::string(text_.substr(start, pos_ - start)));
  } catch (const std::out_of_range&) {
    fail("integer out of range", start + 1);
  }
}

float Cursor::number() {
  skipBlanks();
  std::string s(text_.substr(pos_, 64));
  char* end = nullptr;
  float v = std::strtof(s.c_str(), &end);
  if (end == s.c_str()) fail("expected a number");
  pos_ += static_cast<size_t>(end - s.c_str());
  return v;
}

std::string Cursor::word() {
  skipBlanks();
  size_t start = pos_;
  while (pos_ < text_.size() &&
         (wordChar(text_[pos_]) || (text_[pos_] == '.' && pos_ > start && pos_ + 1 < text_.size() && wordChar(text_[pos_ + 1]))))
    ++pos_;
  if (pos_ == start) fail("expected a name");
  return std::string(text_.substr(start, pos_ - start));
}

int Cursor::oneOf(const std::vector<std::string>& names, std::string_view next, const char* what) {
  skipBlanks();
  int best = -1;
  std::string_view r = rest();
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& n = names[i];
    if (r.substr(0, n.size()) == n && r.substr(n.size(), next.size()) == next &&
        (best < 0 || n.size() > names[static_cast<size_t>(best)].size()))
      best = static_cast<int>(i);
  }
  if (best < 0) {
    if (!what) return -1;
    fail(fmt::format("unknown {} at '{}'", what, printable(std::string(r.substr(0, 24)))));
  }
  pos_ += names[static_cast<size_t>(best)].size();
  return best;
}

KernelScope::KernelScope(Kernel& k) : kernel(k) {
  for (auto& p : k.params) paramNames.push_back(p.name);
  for (auto& s : k.shared) sharedNames.push_back(s.name);
  for (size_t i = 0; i < k.floatVars.size(); ++i) floats.emplace(k.floatVars[i], static_cast<int>(i));
  for (size_t i = 0; i < k.pairVars.size(); ++i) pairs.emplace(k.pairVars[i], static_cast<int>(i));
  vars = {{"threadIdx.x", kThreadIdx}, {"blockIdx.x", kBlockIdx}};
}

int KernelScope::defineVar(const std::string& name) {
  vars.emplace_back(name, nextVar);
  return nextVar++;
}

int KernelScope::var(Cursor& c, const std::string& name) const {
  for (auto it = vars.rbegin(); it != vars.rend(); ++it)
    if (it->first == name) return it->second;
  c.fail(fmt::format("index variable '{}' is not defined here", name), c.column() - name.size());
}

int KernelScope::floatSlot(Cursor& c) {
  size_t col = c.here();
  c.expect("%");
  std::string n = c.word();
  auto it = floats.find(n);
  if (it == floats.end()) c.fail(fmt::format("float '%{}' is not declared in the kernel's floats", n), col);
  return it->second;
}

int KernelScope::pairReg(Cursor& c) {
  size_t col = c.here();
  c.expect("$");
  std::string n = c.word();
  auto it = pairs.find(n);
  if (it == pairs.end()) c.fail(fmt::format("pair register '${}' is not declared in the kernel's pairs", n), col);
  return it->second;
}

DType parseDTypeWord(Cursor& c) {
  size_t col = c.here();
  std::string w = c.word();
  auto t = parseDType(w);
  if (!t) c.fail(fmt::format("unknown dtype '{}'", w), col);
  return *t;
}

namespace {

Idx bitExpr(Cursor& c, const KernelScope& s);

Idx factor(Cursor& c, const KernelScope& s) {
  c.skipBlanks();
  if (c.accept("(")) {
    Idx e = bitExpr(c, s);
    c.expect(")");
    return e;
  }
  for (auto [word, op] : {std::pair{"min(", IndexNode::Op::Min}, std::pair{"max(", IndexNode::Op::Max}}) {
    if (!c.accept(word)) continue;
    Idx a = bitExpr(c, s);
    c.expect(",");
    Idx b = bitExpr(c, s);
    c.expect(")");
    return node(op, a, b);
  }
  char ch = c.rest().empty() ? '\0' : c.rest()[0];
  if (ch == '-' || std::isdigit(static_cast<unsigned char>(ch))) return constant(c.integer());
  if (int param = c.oneOf(s.paramNames, "[", nullptr); param >= 0) {  // an index read from memory
    c.expect("[");
    auto n = std::make_shared<IndexNode>();
    n->op = IndexNode::Op::Load;
    n->buffer = param;
    n->name = s.paramNames[static_cast<size_t>(param)];
    n->a = bitExpr(c, s);
    c.expect("]");
    return n;
  }
  if (!wordChar(ch)) c.fail("expected an index expression");
  std::string name = c.word();
  auto n = std::make_shared<IndexNode>();
  n->op = IndexNode::Op::Var;
  n->var = s.var(c, name);
  n->name = name;
  return n;
}

Idx term(Cursor& c, const KernelScope& s) {
  Idx e = factor(c, s);
  for (;;) {
    if (c.accept("*")) e = node(IndexNode::Op::Mul, e, factor(c, s));
    else if (c.acceptWord("floordiv")) e = node(IndexNode::Op::FloorDiv, e, factor(c, s));
    else if (c.acceptWord("mod")) e = node(IndexNode::Op::Mod, e, factor(c, s));
    else return e;
  }
}

Idx sum(Cursor& c, const KernelScope& s) {
  Idx e = term(c, s);
  for (;;) {
    if (c.accept("+")) e = node(IndexNode::Op::Add, e, term(c, s));
    else if (c.accept("- ")) e = node(IndexNode::Op::Add, e, constant(-c.integer()));  // toString's `a - k`
    else return e;
  }
}

Idx bitExpr(Cursor& c, const KernelScope& s) {
  Idx e = sum(c, s);
  for (;;) {
    if (c.accept("^")) e = node(IndexNode::Op::Xor, e, sum(c, s));
    else if (c.accept("<<")) e = node(IndexNode::Op::Shl, e, sum(c, s));
    else if (c.accept(">>")) e = node(IndexNode::Op::Shr, e, sum(c, s));
    else return e;
  }
}

std::optional<Fn> fnByName(const std::string& name) {
  for (int f = static_cast<int>(Fn::Neg); f <= static_cast<int>(Fn::Where); ++f)
    if (name == tensor::fnName(static_cast<Fn>(f))) return static_cast<Fn>(f);
  return std::nullopt;
}

FE makeLoad(FExpr::Kind kind, int target, Idx index) {
  auto e = std::make_shared<FExpr>();
  e->kind = kind;
  (kind == FExpr::Kind::LoadGlobal ? e->param : e->shared) = target;
  e->index = std::move(index);
  return e;
}

}  // namespace

Idx parseIdx(Cursor& c, const KernelScope& scope) { return bitExpr(c, scope); }

FE parseFExpr(Cursor& c, KernelScope& s) {
  c.skipBlanks();
  if (c.startsWith("%")) {
    auto e = std::make_shared<FExpr>();
    e->kind = FExpr::Kind::Var;
    e->var = s.floatSlot(c);
    return e;
  }
  if (c.acceptWord("load")) {
    bool shared = c.acceptWord("shared");
    int target = shared ? s.shared(c) : s.param(c);
    c.expect("[");
    Idx index = parseIdx(c, s);
    c.expect("]");
    return makeLoad(shared ? FExpr::Kind::LoadShared : FExpr::Kind::LoadGlobal, target, index);
  }
  if (c.accept("select(")) {
    Idx lhs = parseIdx(c, s);
    c.expect("<");
    Idx bound = parseIdx(c, s);
    c.expect(",");
    FE a = parseFExpr(c, s);
    c.expect(",");
    FE b = parseFExpr(c, s);
    c.expect(")");
    return fselect(lhs, bound, a, b);
  }
  if (c.accept("cast<")) {
    DType to = parseDTypeWord(c);
    c.expect(">(");
    FE arg = parseFExpr(c, s);
    c.expect(")");
    return fapply(Fn::Cast, {arg}, to);
  }
  char ch = c.rest().empty() ? '\0' : c.rest()[0];
  if (std::isalpha(static_cast<unsigned char>(ch)) && !c.startsWith("inf") && !c.startsWith("nan")) {
    size_t col = c.here();
    std::string name = c.word();
    auto fn = fnByName(name);
    if (!fn) c.fail(fmt::format("unknown function '{}'", name), col);
    c.expect("(");
    std::vector<FE> args{parseFExpr(c, s)};
    while (c.accept(",")) args.push_back(parseFExpr(c, s));
    c.expect(")");
    if (static_cast<int>(args.size()) != tensor::arity(*fn))
      c.fail(fmt::format("{} takes {} operands, not {}", name, tensor::arity(*fn), args.size()), col);
    auto e = std::make_shared<FExpr>();
    e->kind = FExpr::Kind::Apply;
    e->fn = *fn;
    e->args = std::move(args);
    return e;
  }
  return fconst(c.number());
}

}  // namespace kiln::kernel::parse_detail
