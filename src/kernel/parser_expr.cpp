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

namespace {

FE makeLoad(FExpr::Kind kind, int target, Idx index) {
  auto e = std::make_shared<FExpr>();
  e->kind = kind;
  (kind == FExpr::Kind::LoadGlobal ? e->param : e->shared) = target;
  e->index = std::move(index);
  return e;
}

}  // namespace

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
    auto fn = tensor::fnByName(name);
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
