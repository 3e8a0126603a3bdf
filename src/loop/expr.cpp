#include <fmt/format.h>

#include "kiln/loop/ir.h"

namespace kiln::loop {

const char* bufferKindName(Buffer::Kind k) {
  switch (k) {
    case Buffer::Kind::Input: return "input";
    case Buffer::Kind::Weight: return "weight";
    case Buffer::Kind::Temp: return "temp";
    case Buffer::Kind::Output: return "output";
  }
  return "?";
}

ExprP load(int buffer, std::vector<Idx> index) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::Load;
  e->buffer = buffer;
  e->index = std::move(index);
  return e;
}

ExprP imm(float v) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::Imm;
  e->imm = v;
  return e;
}

ExprP apply(Fn fn, std::vector<ExprP> args) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::Apply;
  e->fn = fn;
  e->args = std::move(args);
  return e;
}

ExprP accRef() {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::Acc;
  return e;
}

std::string exprKey(const ExprP& e) {
  switch (e->kind) {
    case Expr::Kind::Imm: return fmt::format("{}", e->imm);
    case Expr::Kind::Acc: return "acc";
    case Expr::Kind::Load: {
      std::string s = fmt::format("b{}[", e->buffer);
      for (auto& i : e->index) s += toString(i) + ",";
      return s + "]";
    }
    case Expr::Kind::Apply: {
      std::string s = fmt::format("{}:{}(", tensor::fnName(e->fn), dtypeName(e->castTo));
      for (auto& a : e->args) s += exprKey(a) + ",";
      return s + ")";
    }
  }
  return "?";
}

ExprP mapLoads(const ExprP& e, const std::function<ExprP(const Expr&)>& f) {
  if (e->kind == Expr::Kind::Load) return f(*e);
  if (e->kind != Expr::Kind::Apply) return e;
  auto copy = std::make_shared<Expr>(*e);
  for (auto& a : copy->args) a = mapLoads(a, f);
  return copy;
}

void forEachLoad(const ExprP& e, const std::function<void(const Expr&)>& f) {
  if (e->kind == Expr::Kind::Load) f(*e);
  for (auto& a : e->args) forEachLoad(a, f);
}

int64_t applyCount(const ExprP& e) {
  int64_t n = e->kind == Expr::Kind::Apply ? 1 : 0;
  for (auto& a : e->args) n += applyCount(a);
  return n;
}

VarExtents Kernel::extents() const {
  VarExtents ext;
  for (auto& a : parallel) ext[a.var] = a.extent;
  if (reduction)
    for (auto& a : reduction->axes) ext[a.var] = a.extent;
  return ext;
}

int64_t Kernel::parallelPoints() const {
  int64_t n = 1;
  for (auto& a : parallel) n *= a.extent;
  return n;
}

int64_t Kernel::iterations() const {
  int64_t n = parallelPoints();
  if (reduction)
    for (auto& a : reduction->axes) n *= a.extent;
  return n;
}

}  // namespace kiln::loop
