// Loop IR parser: a kernel's loop nest, line by line as printKernelBody writes it (see kiln/loop/parser.h):
//
//   for AXES rows: | for AXES parallel:        the row axes (then stages, and the other axes after them) or all axes
//     accS = 0 | -inf; for AXES reduce: ...; accS = FN(accS, X)         a stage
//     online softmax over J < N[ (empty rows 0)]: acc0 = 0; for D < N reduce: ...; acc0 = sum(acc0, X); ...; score = X
//   for AXES parallel:                         the axes after the row axes (rows only)
//     ...; [acc0 = softmax-weighted sum over J of X]; ...; store BUFFER[AXES] = X
//   read only at AXIS = INDEX                  optional (Kernel::readOnlyAt)
//
// where `...` are expression lines `%N = load B[I, ..] | select(I < I, X, X) | FN(X, ..) [to DTYPE]` and an operand X
// is `%N`, `accS` or a number. Expressions are rebuilt node for node, without the constructors' folding.
#include <fmt/format.h>

#include <map>

#include "kiln/loop/parser.h"
#include "kiln/support/error.h"

namespace kiln::loop::parse_detail {
namespace {

using ir_text::Cursor;
using ir_text::LineReader;

// The names in scope where the parser stands: axes (innermost last), expression lines, buffers.
struct BodyScope : ir_text::IdxNames {
  const std::vector<Buffer>& buffers;
  std::vector<std::string> names;
  std::vector<std::pair<std::string, int>> vars;
  std::map<std::string, ExprP> values;  // `%N` lines
  int nextVar = 0;

  explicit BodyScope(const std::vector<Buffer>& b) : buffers(b) {
    for (auto& buf : b) names.push_back(buf.name);
  }
  int var(Cursor& c, const std::string& name) const override {
    for (auto it = vars.rbegin(); it != vars.rend(); ++it)
      if (it->first == name) return it->second;
    c.fail(fmt::format("axis '{}' is not defined here", name), c.column() - name.size());
  }
  const std::vector<std::string>& indexSources() const override { return names; }
};

// `NAME < EXTENT, ...` up to ` WORD:` (the word not consumed); each axis defined in scope from here on.
std::vector<Axis> axes(Cursor& c, BodyScope& s) {
  std::vector<Axis> out;
  do {
    Axis a;
    a.name = c.word();
    c.expect("<");
    a.extent = c.integer();
    a.var = s.nextVar++;
    s.vars.emplace_back(a.name, a.var);
    out.push_back(a);
  } while (c.accept(","));
  return out;
}

ExprP operand(Cursor& c, BodyScope& s) {
  size_t col = c.here();
  if (c.accept("%")) {
    std::string n = c.word();
    auto it = s.values.find(n);
    if (it == s.values.end()) c.fail(fmt::format("'%{}' is not defined above", n), col);
    return it->second;
  }
  if (c.accept("acc")) {
    auto e = std::make_shared<Expr>();
    e->kind = Expr::Kind::Acc;
    e->stage = static_cast<int>(c.integer());
    return e;
  }
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::Imm;
  e->imm = c.number();
  return e;
}

ExprP loadExpr(Cursor& c, BodyScope& s) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::Load;
  e->buffer = c.oneOf(s.names, "[", "buffer");
  c.expect("[");
  if (!c.accept("]")) {
    do e->index.push_back(ir_text::parseIdx(c, s));
    while (c.accept(","));
    c.expect("]");
  }
  return e;
}

ExprP selectExpr(Cursor& c, BodyScope& s) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::Select;
  e->index.push_back(ir_text::parseIdx(c, s));
  c.expect("<");
  e->index.push_back(ir_text::parseIdx(c, s));
  c.expect(",");
  e->args.push_back(operand(c, s));
  c.expect(",");
  e->args.push_back(operand(c, s));
  c.expect(")");
  return e;
}

ExprP applyExpr(Cursor& c, BodyScope& s) {
  size_t col = c.here();
  std::string name = c.word();
  auto fn = tensor::fnByName(name);
  if (!fn) c.fail(fmt::format("unknown function '{}'", name), col);
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::Apply;
  e->fn = *fn;
  c.expect("(");
  do e->args.push_back(operand(c, s));
  while (c.accept(","));
  c.expect(")");
  if (static_cast<int>(e->args.size()) != tensor::arity(*fn))
    c.fail(fmt::format("{} takes {} operands, not {}", name, tensor::arity(*fn), e->args.size()), col);
  if (*fn == Fn::Cast) {
    c.expect("to");
    e->castTo = ir_text::parseDTypeWord(c);
  }
  return e;
}

// `%N = ...` lines, defined in s.values, up to the first line that is not one.
void exprLines(LineReader& lines, BodyScope& s) {
  while (!lines.done()) {
    const ir_text::Line& line = lines.peek();
    Cursor c(lines.file(), line.number, line.text);
    if (!c.accept("%")) return;
    lines.take();
    std::string n = c.word();
    c.expect("=");
    ExprP e = c.acceptWord("load") ? loadExpr(c, s) : c.accept("select(") ? selectExpr(c, s) : applyExpr(c, s);
    c.expectEnd();
    if (!s.values.emplace(n, e).second) c.fail(fmt::format("'%{}' is defined twice", n));
  }
}

// The next line of the body: a Cursor over it (the line taken), or a failure where the body has ended.
Cursor next(LineReader& lines, const char* expected) {
  if (lines.done() || lines.peek().text.rfind("  ", 0) != 0) {
    int at = lines.done() ? lines.lastLine() : lines.peek().number;
    Cursor(lines.file(), at, "").fail(fmt::format("the kernel's loop nest ends where {} was expected", expected));
  }
  const ir_text::Line& line = lines.take();
  return Cursor(lines.file(), line.number, line.text);
}

// `accS = FN(accS, X)` closing a reduction over the axes just read; returns X.
ExprP combineLine(LineReader& lines, BodyScope& s, int stage, ReduceFn* fn) {
  Cursor c = next(lines, "the reduction's 'acc = ...' line");
  std::string acc = fmt::format("acc{}", stage);
  c.expect(acc);
  c.expect("=");
  size_t col = c.here();
  std::string name = c.word();
  if (name == "sum") *fn = ReduceFn::Sum;
  else if (name == "max") *fn = ReduceFn::Max;
  else c.fail(fmt::format("unknown reduction '{}' (sum or max)", name), col);
  c.expect("(");
  c.expect(acc);
  c.expect(",");
  ExprP v = operand(c, s);
  c.expect(")");
  c.expectEnd();
  return v;
}

// `for AXES reduce:`, its expression lines and the closing combine line; the axes leave scope after it.
Reduction reduction(LineReader& lines, BodyScope& s, int stage) {
  Reduction r;
  Cursor c = next(lines, "'for ... reduce:'");
  c.expect("for");
  size_t depth = s.vars.size();
  r.axes = axes(c, s);
  c.expect("reduce:");
  c.expectEnd();
  exprLines(lines, s);
  r.value = combineLine(lines, s, stage, &r.fn);
  s.vars.resize(depth);
  return r;
}

void stage(Cursor& c, LineReader& lines, BodyScope& s, Kernel& k) {
  const int st = static_cast<int>(k.stages.size());
  if (c.integer() != st) c.fail(fmt::format("stages are numbered in order: expected acc{}", st));
  c.expect("=");
  if (!c.accept("0") && !c.accept("-inf")) c.fail("a stage starts at 0 (sum) or -inf (max)");
  c.expectEnd();
  k.stages.push_back(reduction(lines, s, st));
}

void attention(Cursor& c, LineReader& lines, BodyScope& s, Kernel& k) {
  OnlineSoftmax a;
  std::vector<Axis> key = axes(c, s);
  if (key.size() != 1) c.fail("online softmax runs over one key axis");
  a.key = key[0];
  a.emptyRowsZero = c.accept("(empty rows 0)");
  c.expect(":");
  c.expectEnd();
  Cursor init = next(lines, "'acc0 = 0'");
  init.expect("acc0 = 0");
  init.expectEnd();
  a.dot = reduction(lines, s, 0);
  exprLines(lines, s);
  Cursor score = next(lines, "'score = ...'");
  score.expect("score =");
  a.score = operand(score, s);
  score.expectEnd();
  k.attention = std::move(a);
}

// The rows line, then stages or the online softmax, up to the line after them.
void rowPart(LineReader& lines, BodyScope& s, Kernel& k) {
  for (;;) {
    if (lines.done()) return;
    Cursor c(lines.file(), lines.peek().number, lines.peek().text);
    if (c.accept("acc")) {
      lines.take();
      stage(c, lines, s, k);
    } else if (c.accept("online softmax over")) {
      lines.take();
      if (k.attention || !k.stages.empty()) c.fail("a kernel has stages or one online softmax, not both");
      attention(c, lines, s, k);
    } else {
      return;
    }
  }
}

// The expression lines of the output, the attention's weighted sum among them, and the store.
void storePart(LineReader& lines, BodyScope& s, Kernel& k) {
  exprLines(lines, s);
  if (k.attention) {
    Cursor w = next(lines, "'acc0 = softmax-weighted sum over ...'");
    w.expect("acc0 = softmax-weighted sum over");
    w.expect(k.attention->key.name);
    w.expect("of");
    k.attention->value = operand(w, s);
    w.expectEnd();
    exprLines(lines, s);
  }
  Cursor c = next(lines, "the 'store' line");
  c.expect("store");
  size_t col = c.here();
  if (c.oneOf(s.names, "[", "buffer") != k.output) c.fail("a kernel stores the buffer it writes", col);
  c.expect("[");
  for (size_t i = 0; i < k.parallel.size(); ++i) {
    if (i) c.expect(",");
    c.expect(k.parallel[i].name);
  }
  c.expect("]");
  c.expect("=");
  k.result = operand(c, s);
  c.expectEnd();
}

// `read only at E = GROUP` (Kernel::readOnlyAt): E the first parallel axis, GROUP an index over one other parallel axis.
void readOnlyAt(LineReader& lines, BodyScope& s, Kernel& k) {
  if (lines.done()) return;
  Cursor c(lines.file(), lines.peek().number, lines.peek().text);
  if (!c.accept("read only at")) return;
  lines.take();
  if (k.parallel.size() < 2) c.fail("'read only at' needs a kernel of two parallel axes or more");
  c.expect(k.parallel[0].name);
  c.expect("=");
  size_t col = c.here();
  ReadOnlyAt r;
  r.group = ir_text::parseIdx(c, s);
  c.expectEnd();
  std::vector<int> vars;
  forEachVar(r.group, [&](int v) { vars.push_back(v); });
  for (size_t d = 1; d < k.parallel.size(); ++d)
    if (!vars.empty() && k.parallel[d].var == vars[0]) r.rowAxis = static_cast<int>(d);
  for (int v : vars)
    if (r.rowAxis < 0 || v != vars[0]) c.fail("the group is an index over one parallel axis other than the first", col);
  k.readOnlyAt = r;
}

}  // namespace

void kernelBody(LineReader& lines, const std::vector<Buffer>& buffers, Kernel& k) {
  BodyScope s(buffers);
  Cursor c = next(lines, "'for ... parallel:' or 'for ... rows:'");
  c.expect("for");
  const bool single = c.accept("a single row");
  const bool scalar = !single && c.accept("parallel:");  // one element (a 0-d output): no axes
  std::vector<Axis> first = single || scalar ? std::vector<Axis>{} : axes(c, s);
  const bool rows = !scalar && c.accept("rows:");
  if (!rows && !scalar) c.expect("parallel:");
  if (single && !rows) c.fail("'a single row' is written only as 'for a single row rows:'");
  c.expectEnd();
  k.parallel = first;
  rowPart(lines, s, k);
  k.rowAxes = rows || !k.stages.empty() || k.attention ? static_cast<int>(first.size()) : 0;
  if (rows) {
    Cursor inner = next(lines, "'for ... parallel:'");
    inner.expect("for");
    for (const Axis& a : axes(inner, s)) k.parallel.push_back(a);
    inner.expect("parallel:");
    inner.expectEnd();
  }
  storePart(lines, s, k);
  readOnlyAt(lines, s, k);
  if (!lines.done() && lines.peek().text.rfind("  ", 0) == 0) {
    Cursor extra(lines.file(), lines.peek().number, lines.peek().text);
    extra.fail("a kernel's loop nest ends with its 'store' line");
  }
}

}  // namespace kiln::loop::parse_detail
