#include <cmath>

#include "kiln/support/error.h"
#include "kiln/tensor/ir.h"

namespace kiln::tensor {

int arity(Fn f) { return f == Fn::Where ? 3 : f >= Fn::Add ? 2 : 1; }

const char* fnName(Fn f) {
  switch (f) {
    case Fn::Neg: return "neg";
    case Fn::Exp: return "exp";
    case Fn::Exp2: return "exp2";
    case Fn::Rsqrt: return "rsqrt";
    case Fn::Sqrt: return "sqrt";
    case Fn::Relu: return "relu";
    case Fn::Silu: return "silu";
    case Fn::Sigmoid: return "sigmoid";
    case Fn::Tanh: return "tanh";
    case Fn::Abs: return "abs";
    case Fn::Gelu: return "gelu";
    case Fn::GeluTanh: return "gelu_tanh";
    case Fn::Cast: return "cast";
    case Fn::Cos: return "cos";
    case Fn::Sin: return "sin";
    case Fn::Not: return "logical_not";
    case Fn::Lt: return "lt";
    case Fn::Le: return "le";
    case Fn::Gt: return "gt";
    case Fn::Ge: return "ge";
    case Fn::Eq: return "eq";
    case Fn::Ne: return "ne";
    case Fn::And: return "logical_and";
    case Fn::Where: return "where";
    case Fn::Add: return "add";
    case Fn::Sub: return "sub";
    case Fn::Mul: return "mul";
    case Fn::Div: return "div";
    case Fn::Pow: return "pow";
    case Fn::Max: return "max";
    case Fn::Min: return "min";
  }
  return "?";
}

namespace {

float applyUnary(Fn f, float a) {
  switch (f) {
    case Fn::Neg: return -a;
    case Fn::Exp: return std::exp(a);
    case Fn::Exp2: return std::exp2(a);
    case Fn::Rsqrt: return 1.f / std::sqrt(a);
    case Fn::Sqrt: return std::sqrt(a);
    case Fn::Relu: return a < 0.f ? 0.f : a;  // NaN and -0 pass through, as in PyTorch
    case Fn::Silu: return a / (1.f + std::exp(-a));
    case Fn::Sigmoid: return 1.f / (1.f + std::exp(-a));
    case Fn::Tanh: return std::tanh(a);
    case Fn::Abs: return std::fabs(a);
    case Fn::Gelu: return 0.5f * a * (1.f + std::erf(a * 0.70710678118654752f));
    case Fn::GeluTanh: return 0.5f * a * (1.f + std::tanh(0.79788456080286536f * (a + 0.044715f * a * a * a)));
    case Fn::Cast: return a;
    case Fn::Cos: return std::cos(a);
    case Fn::Sin: return std::sin(a);
    case Fn::Not: return a == 0.f ? 1.f : 0.f;
    default: return 0.f;
  }
}

// Comparisons and logical and: 1 or 0.
float applyPredicate(Fn f, float a, float b) {
  switch (f) {
    case Fn::Lt: return a < b;
    case Fn::Le: return a <= b;
    case Fn::Gt: return a > b;
    case Fn::Ge: return a >= b;
    case Fn::Eq: return a == b;
    case Fn::Ne: return a != b;
    case Fn::And: return (a != 0.f && b != 0.f) ? 1.f : 0.f;
    default: return 0.f;
  }
}

float applyArithmetic(Fn f, float a, float b) {
  switch (f) {
    case Fn::Add: return a + b;
    case Fn::Sub: return a - b;
    case Fn::Mul: return a * b;
    case Fn::Div: return a / b;
    case Fn::Pow: return b == 2.f ? a * a : std::pow(a, b);
    case Fn::Max: return a > b || std::isnan(a) ? a : b;
    case Fn::Min: return a < b || std::isnan(a) ? a : b;
    default: return applyPredicate(f, a, b);
  }
}

}  // namespace

// Keep in step with templates/kiln_ops.cuh, which gives the GPU the same definitions.
float applyFn(Fn f, float a, float b, float c) {
  if (f == Fn::Where) return a != 0.f ? b : c;
  return arity(f) == 1 ? applyUnary(f, a) : applyArithmetic(f, a, b);
}

std::optional<Fn> fnByName(std::string_view name) {
  for (int f = static_cast<int>(Fn::Neg); f <= static_cast<int>(Fn::Where); ++f)
    if (name == fnName(static_cast<Fn>(f))) return static_cast<Fn>(f);
  return std::nullopt;
}

const char* reduceName(ReduceFn f) { return f == ReduceFn::Sum ? "sum" : "max"; }
float reduceInit(ReduceFn f) { return f == ReduceFn::Sum ? 0.f : -INFINITY; }
float reduceCombine(ReduceFn f, float acc, float v) { return f == ReduceFn::Sum ? acc + v : applyFn(Fn::Max, acc, v); }

Idx outVar(int d) { return idxVar(d, "o" + std::to_string(d)); }

}  // namespace kiln::tensor
