// loop-reciprocal-row-divisors: in a kernel with reduction stages, a division of a row's elements by a value that is
// the same for the whole row (softmax's sum, a mean's count times a total) becomes a multiplication by that value's
// reciprocal: x / s -> x * (1 / s). Kernel lowering computes row-invariant values once per row (before the row's
// write), so the row pays one division instead of one per element; an IEEE division is about ten instructions, a
// multiplication one. The result differs from the division by at most one rounding (x * (1/s) is within 1.5 ulp
// of x / s), well inside the f32 check's 1e-5.
// Rewritten: divisions in the result and in every stage's value whose divisor reads only accumulators,
// immediates and memory at the row axes' indices, and is not itself an immediate (x / 2048 stays as it is: its
// divisor is a constant that costs nothing to divide by per row, and exact divisions by powers of two stay exact).
// Precondition: loop-fuse-rows has formed the rows. Postcondition: every Div in a kernel with stages whose divisor is
// row-invariant and not an immediate is a reciprocal 1 / s (so a second run changes nothing).
#include "kiln/loop/ir.h"

namespace kiln::loop {
namespace {

ExprP rewrite(const ExprP& e, const Kernel& k, bool& changed) {
  if (e->kind != Expr::Kind::Apply && e->kind != Expr::Kind::Select) return e;
  std::vector<ExprP> args;
  bool argsChanged = false;
  for (auto& a : e->args) {
    args.push_back(rewrite(a, k, changed));
    argsChanged = argsChanged || args.back() != a;
  }
  const bool reciprocal = args[0]->kind == Expr::Kind::Imm && args[0]->imm == 1.f;  // already 1 / s
  if (e->kind == Expr::Kind::Apply && e->fn == Fn::Div && !reciprocal && args[1]->kind != Expr::Kind::Imm &&
      rowInvariant(args[1], k)) {
    changed = true;
    return apply(Fn::Mul, {args[0], apply(Fn::Div, {imm(1.f), args[1]})});
  }
  if (!argsChanged) return e;
  auto copy = std::make_shared<Expr>(*e);
  copy->args = std::move(args);
  return copy;
}

}  // namespace

bool reciprocalRowDivisors(Program& p) {
  bool changed = false;
  for (Kernel& k : p.kernels) {
    if (k.stages.empty()) continue;
    k.result = rewrite(k.result, k, changed);
    for (Reduction& s : k.stages) s.value = rewrite(s.value, k, changed);
  }
  return changed;
}

}  // namespace kiln::loop
