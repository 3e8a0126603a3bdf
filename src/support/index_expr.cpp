#include "kiln/support/index_expr.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <numeric>

#include "kiln/support/error.h"

namespace kiln {
namespace {

using Op = IndexNode::Op;

Idx make(Op op, Idx a, Idx b) {
  auto n = std::make_shared<IndexNode>();
  n->op = op;
  n->a = std::move(a);
  n->b = std::move(b);
  return n;
}

int64_t floorDivInt(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floorModInt(int64_t a, int64_t b) { return a - floorDivInt(a, b) * b; }

// An affine view of an expression: sum of coef * term + constant, terms being non-Add/non-Const nodes.
struct Affine {
  std::vector<std::pair<int64_t, Idx>> terms;
  int64_t constant = 0;
};

void collect(const Idx& e, int64_t scale, Affine& out) {
  if (e->op == Op::Const) {
    out.constant += scale * e->value;
  } else if (e->op == Op::Add) {
    collect(e->a, scale, out);
    collect(e->b, scale, out);
  } else if (e->op == Op::Mul && constValue(e->b)) {
    collect(e->a, scale * *constValue(e->b), out);
  } else if (e->op == Op::Mul && constValue(e->a)) {
    collect(e->b, scale * *constValue(e->a), out);
  } else {
    for (auto& [c, t] : out.terms)
      if (sameIdx(t, e)) {
        c += scale;
        return;
      }
    out.terms.push_back({scale, e});
  }
}

Idx rebuild(const Affine& a) {
  Idx r;
  for (auto& [c, t] : a.terms) {
    if (c == 0) continue;
    Idx term = idxMul(t, c);
    r = r ? make(Op::Add, r, term) : term;
  }
  if (!r) return idxConst(a.constant);
  return a.constant ? make(Op::Add, r, idxConst(a.constant)) : r;
}

}  // namespace

Idx idxConst(int64_t v) {
  auto n = std::make_shared<IndexNode>();
  n->op = Op::Const;
  n->value = v;
  return n;
}

Idx idxVar(int id, std::string name) {
  auto n = std::make_shared<IndexNode>();
  n->op = Op::Var;
  n->var = id;
  n->name = std::move(name);
  return n;
}

Idx idxLoad(int buffer, std::string name, const Idx& flat) {
  auto n = std::make_shared<IndexNode>();
  n->op = Op::Load;
  n->buffer = buffer;
  n->name = std::move(name);
  n->a = flat;
  return n;
}

std::optional<int64_t> constValue(const Idx& e) {
  if (e && e->op == Op::Const) return e->value;
  return std::nullopt;
}

bool sameIdx(const Idx& a, const Idx& b) {
  if (a == b) return true;
  if (!a || !b || a->op != b->op) return false;
  switch (a->op) {
    case Op::Const: return a->value == b->value;
    case Op::Var: return a->var == b->var;
    case Op::Load: return a->buffer == b->buffer && sameIdx(a->a, b->a);
    default: return sameIdx(a->a, b->a) && sameIdx(a->b, b->b);
  }
}

Idx operator+(const Idx& a, const Idx& b) {
  auto ca = constValue(a), cb = constValue(b);
  if (ca && cb) return idxConst(*ca + *cb);
  if (ca == 0) return b;
  if (cb == 0) return a;
  if (ca) return make(Op::Add, b, a);  // constants last
  return make(Op::Add, a, b);
}

Idx operator*(const Idx& a, const Idx& b) {
  auto ca = constValue(a), cb = constValue(b);
  if (ca && cb) return idxConst(*ca * *cb);
  if (ca == 0 || cb == 0) return idxConst(0);
  if (ca == 1) return b;
  if (cb == 1) return a;
  if (ca) return make(Op::Mul, b, a);  // constant factor last
  return make(Op::Mul, a, b);
}

Idx idxAdd(const Idx& a, int64_t c) { return a + idxConst(c); }
Idx idxMul(const Idx& a, int64_t c) { return a * idxConst(c); }

Idx floorDiv(const Idx& a, int64_t d) {
  KILN_ASSERT(d > 0, "floordiv by {}", d);
  if (d == 1) return a;
  if (auto c = constValue(a)) return idxConst(floorDivInt(*c, d));
  return make(Op::FloorDiv, a, idxConst(d));
}

Idx mod(const Idx& a, int64_t d) {
  KILN_ASSERT(d > 0, "mod by {}", d);
  if (d == 1) return idxConst(0);
  if (auto c = constValue(a)) return idxConst(floorModInt(*c, d));
  return make(Op::Mod, a, idxConst(d));
}

Idx idxMin(const Idx& a, const Idx& b) {
  auto ca = constValue(a), cb = constValue(b);
  if (ca && cb) return idxConst(std::min(*ca, *cb));
  return make(Op::Min, a, b);
}

Idx idxMax(const Idx& a, const Idx& b) {
  auto ca = constValue(a), cb = constValue(b);
  if (ca && cb) return idxConst(std::max(*ca, *cb));
  return make(Op::Max, a, b);
}

Idx idxXor(const Idx& a, const Idx& b) {
  auto ca = constValue(a), cb = constValue(b);
  if (ca && cb) return idxConst(*ca ^ *cb);
  if (ca == 0) return b;
  if (cb == 0) return a;
  if (ca) return make(Op::Xor, b, a);  // constant last
  return make(Op::Xor, a, b);
}

Idx shl(const Idx& a, int64_t c) {
  KILN_ASSERT(c >= 0 && c < 63, "shift left by {}", c);
  if (c == 0) return a;
  if (auto v = constValue(a)) return idxConst(static_cast<int64_t>(static_cast<uint64_t>(*v) << c));
  return make(Op::Shl, a, idxConst(c));
}

Idx shr(const Idx& a, int64_t c) {
  KILN_ASSERT(c >= 0 && c < 63, "shift right by {}", c);
  if (c == 0) return a;
  if (auto v = constValue(a)) return idxConst(*v >> c);
  return make(Op::Shr, a, idxConst(c));
}

namespace {

// Bounds with "unknown" as an infinite bound, so that min/max clamps of data-dependent values
// (gather indices) still get a finite range.
constexpr int64_t kLo = std::numeric_limits<int64_t>::min(), kHi = std::numeric_limits<int64_t>::max();
using Bounds = std::pair<int64_t, int64_t>;
bool finite(const Bounds& r) { return r.first != kLo && r.second != kHi; }

Bounds bounds(const Idx& e, const VarExtents& ext) {
  switch (e->op) {
    case Op::Const: return {e->value, e->value};
    case Op::Var: {
      auto it = ext.find(e->var);
      if (it == ext.end() || it->second < 1) return {kLo, kHi};
      return {0, it->second - 1};
    }
    case Op::Load: return {kLo, kHi};
    default: break;
  }
  Bounds ra = bounds(e->a, ext), rb = bounds(e->b, ext);
  auto [alo, ahi] = ra;
  auto [blo, bhi] = rb;
  switch (e->op) {
    case Op::Min: return {alo == kLo || blo == kLo ? kLo : std::min(alo, blo), std::min(ahi, bhi)};
    case Op::Max: return {std::max(alo, blo), ahi == kHi || bhi == kHi ? kHi : std::max(ahi, bhi)};
    case Op::Mod:
      if (blo != bhi || blo <= 0) return {kLo, kHi};
      if (finite(ra) && alo >= 0 && ahi < blo) return ra;
      return {0, blo - 1};
    default: break;
  }
  if (!finite(ra) || !finite(rb)) return {kLo, kHi};
  switch (e->op) {
    case Op::Add: return {alo + blo, ahi + bhi};
    case Op::Mul: {
      int64_t c[] = {alo * blo, alo * bhi, ahi * blo, ahi * bhi};
      return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
    }
    case Op::FloorDiv:
      if (blo != bhi || blo <= 0) return {kLo, kHi};
      return {floorDivInt(alo, blo), floorDivInt(ahi, blo)};
    case Op::Xor: {  // non-negative operands: below the next power of two above the larger maximum
      if (alo < 0 || blo < 0) return {kLo, kHi};
      int64_t top = 1;
      while (top <= std::max(ahi, bhi)) top *= 2;
      return {0, top - 1};
    }
    case Op::Shl:
      if (blo != bhi || blo < 0 || blo > 30 || std::abs(alo) > (int64_t{1} << 32) || std::abs(ahi) > (int64_t{1} << 32))
        return {kLo, kHi};
      return {alo * (int64_t{1} << blo), ahi * (int64_t{1} << blo)};
    case Op::Shr:
      if (blo != bhi || blo < 0) return {kLo, kHi};
      return {alo >> blo, ahi >> blo};
    default: return {kLo, kHi};
  }
}

}  // namespace

std::optional<std::pair<int64_t, int64_t>> idxRange(const Idx& e, const VarExtents& ext) {
  Bounds r = bounds(e, ext);
  if (!finite(r)) return std::nullopt;
  return r;
}

namespace {

// x ^ c adds c when c's set bits all lie above x's range (non-negative x).
Idx simplifyXor(const Idx& e, const VarExtents& ext) {
  Idx a = simplify(e->a, ext), b = simplify(e->b, ext);
  if (auto c = constValue(b); c && *c > 0) {
    int64_t lowBit = *c & -*c;
    if (auto ra = idxRange(a, ext); ra && ra->first >= 0 && ra->second < lowBit) return simplify(a + b, ext);
  }
  return idxXor(a, b);
}

// min and max of operands whose ranges do not overlap are the one operand.
Idx simplifyMinMax(const Idx& e, const VarExtents& ext) {
  Idx a = simplify(e->a, ext), b = simplify(e->b, ext);
  auto ra = idxRange(a, ext), rb = idxRange(b, ext);
  if (ra && rb) {
    if (e->op == Op::Min && ra->second <= rb->first) return a;
    if (e->op == Op::Min && rb->second <= ra->first) return b;
    if (e->op == Op::Max && ra->first >= rb->second) return a;
    if (e->op == Op::Max && rb->first >= ra->second) return b;
  }
  return e->op == Op::Min ? idxMin(a, b) : idxMax(a, b);
}

// An affine sum split by a divisor d: the terms whose coefficients d divides plus the multiple of d in the constant, and
// the remainder (the other terms, the constant modulo d).
struct DivisorSplit {
  Affine divisible, rest;
};

DivisorSplit splitByDivisor(const Affine& aff, int64_t d) {
  DivisorSplit out;
  out.divisible.constant = floorDivInt(aff.constant, d) * d;
  out.rest.constant = aff.constant - out.divisible.constant;
  for (auto& t : aff.terms) (t.first % d == 0 ? out.divisible : out.rest).terms.push_back(t);
  return out;
}

// The divisible part divided by d.
Affine quotientOf(const Affine& divisible, int64_t d) {
  Affine quotient;
  for (auto& [c, t] : divisible.terms) quotient.terms.push_back({c / d, t});
  quotient.constant = divisible.constant / d;
  return quotient;
}

// A small part S of the remainder, in [0, c) where c divides d and the other terms' coefficients:
//   (c*B + S) floordiv d = B floordiv (d/c)   and   (c*B + S) mod d = c*(B mod (d/c)) + S.
// Null when no such part exists.
Idx splitSmallRemainder(const Idx& e, const DivisorSplit& parts, int64_t d, const VarExtents& ext) {
  std::vector<std::pair<int64_t, Idx>> terms = parts.rest.terms;
  std::sort(terms.begin(), terms.end(), [](auto& x, auto& y) { return std::abs(x.first) < std::abs(y.first); });
  for (size_t split = 0; split < terms.size(); ++split) {
    Affine small, big;
    small.constant = parts.rest.constant;
    small.terms.assign(terms.begin(), terms.begin() + static_cast<long>(split));
    int64_t c = d;
    for (size_t i = split; i < terms.size(); ++i) c = std::gcd(c, std::abs(terms[i].first));
    if (c <= 1 || c == d) continue;
    auto sr = idxRange(rebuild(small), ext);
    if (!sr || sr->first < 0 || sr->second >= c) continue;
    for (size_t i = split; i < terms.size(); ++i) big.terms.push_back({terms[i].first / c, terms[i].second});
    Idx b = rebuild(big);
    if (e->op == Op::Mod) return simplify(idxMul(mod(b, d / c), c) + rebuild(small), ext);
    return simplify(rebuild(quotientOf(parts.divisible, d)) + floorDiv(b, d / c), ext);
  }
  return nullptr;
}

Idx simplifyDivMod(const Idx& e, const VarExtents& ext) {
  Idx a = simplify(e->a, ext);
  int64_t d = *constValue(e->b);
  Affine aff;
  collect(a, 1, aff);
  const DivisorSplit parts = splitByDivisor(aff, d);
  Idx restExpr = rebuild(parts.rest);
  auto rr = idxRange(restExpr, ext);
  bool restInRange = rr && rr->first >= 0 && rr->second < d;
  if (!restInRange) {
    if (Idx split = splitSmallRemainder(e, parts, d, ext)) return split;
  }
  if (e->op == Op::Mod) return restInRange ? restExpr : mod(restExpr, d);  // terms d divides vanish under mod d
  Affine quotient = quotientOf(parts.divisible, d);
  if (restInRange) return rebuild(quotient);
  if (quotient.terms.empty() && quotient.constant == 0) return floorDiv(restExpr, d);
  return rebuild(quotient) + floorDiv(restExpr, d);
}

}  // namespace

Idx simplify(const Idx& e, const VarExtents& ext) {
  switch (e->op) {
    case Op::Const:
    case Op::Var: return e;
    case Op::Load: return idxLoad(e->buffer, e->name, simplify(e->a, ext));
    case Op::Xor: return simplifyXor(e, ext);
    case Op::Shl: return shl(simplify(e->a, ext), e->b->value);
    case Op::Shr: return shr(simplify(e->a, ext), e->b->value);
    case Op::Add:
    case Op::Mul: {
      Idx a = simplify(e->a, ext), b = simplify(e->b, ext);
      Affine aff;
      collect(e->op == Op::Add ? a + b : a * b, 1, aff);
      return rebuild(aff);
    }
    case Op::Min:
    case Op::Max: return simplifyMinMax(e, ext);
    case Op::FloorDiv:
    case Op::Mod: return simplifyDivMod(e, ext);
  }
  return e;
}

namespace {

int64_t lowestSetBit(int64_t v) { return v & -v; }

// A positive g that divides e for every assignment, or 0 when e is always 0 (every m divides it).
int64_t knownDivisor(const Idx& e, const VarExtents& ext) {
  constexpr int64_t kCap = int64_t{1} << 40;  // products beyond this give up on the larger factor (still sound)
  switch (e->op) {
    case Op::Const: return std::abs(e->value);
    case Op::Var: {
      auto it = ext.find(e->var);
      return it != ext.end() && it->second == 1 ? 0 : 1;
    }
    case Op::Load: return 1;
    default: break;
  }
  int64_t da = knownDivisor(e->a, ext), db = knownDivisor(e->b, ext);
  switch (e->op) {
    case Op::Add:
    case Op::Min:
    case Op::Max: return std::gcd(da, db);  // gcd(0, x) = x
    case Op::Mul:
      if (da == 0 || db == 0) return 0;
      return da <= kCap / db ? da * db : std::max(da, db);
    case Op::FloorDiv:  // b is a positive constant d
      if (da == 0) return 0;
      return da % db == 0 ? da / db : 1;
    case Op::Mod: return da == 0 ? 0 : std::gcd(da, db);  // x mod d = x - d*(x floordiv d)
    case Op::Xor:  // bits below the lowest set bit of both divisors' power-of-two parts stay clear
      if (da == 0) return db;
      if (db == 0) return da;
      return std::min(lowestSetBit(da), lowestSetBit(db));
    case Op::Shl:
      if (da == 0) return 0;
      return da <= (kCap >> e->b->value) ? da << e->b->value : da;
    case Op::Shr: {
      if (da == 0) return 0;
      int64_t p = int64_t{1} << e->b->value;
      return da % p == 0 ? da / p : 1;  // an exact shift divides the multiple by 2^c
    }
    default: return 1;
  }
}

}  // namespace

bool provablyMultipleOf(const Idx& e, int64_t m, const VarExtents& extents) {
  KILN_ASSERT(m > 0, "provablyMultipleOf: modulus {} must be positive", m);
  if (m == 1) return true;
  int64_t g = knownDivisor(e, extents);
  return g == 0 || g % m == 0;
}

Idx substitute(const Idx& e, const std::function<Idx(int, const std::string&)>& f) {
  switch (e->op) {
    case Op::Const: return e;
    case Op::Var: {
      Idx r = f(e->var, e->name);
      return r ? r : e;
    }
    case Op::Add: return substitute(e->a, f) + substitute(e->b, f);
    case Op::Mul: return substitute(e->a, f) * substitute(e->b, f);
    case Op::FloorDiv: return floorDiv(substitute(e->a, f), e->b->value);
    case Op::Mod: return mod(substitute(e->a, f), e->b->value);
    case Op::Min: return idxMin(substitute(e->a, f), substitute(e->b, f));
    case Op::Max: return idxMax(substitute(e->a, f), substitute(e->b, f));
    case Op::Load: return idxLoad(e->buffer, e->name, substitute(e->a, f));
    case Op::Xor: return idxXor(substitute(e->a, f), substitute(e->b, f));
    case Op::Shl: return shl(substitute(e->a, f), e->b->value);
    case Op::Shr: return shr(substitute(e->a, f), e->b->value);
  }
  return e;
}

void forEachIndexLoad(const Idx& e, const std::function<void(const IndexNode&)>& f) {
  if (e->op == Op::Load) f(*e);
  if (e->a) forEachIndexLoad(e->a, f);
  if (e->b) forEachIndexLoad(e->b, f);
}

Idx mapIndexLoads(const Idx& e, const std::function<Idx(const IndexNode&, const Idx&)>& f) {
  switch (e->op) {
    case Op::Const:
    case Op::Var: return e;
    case Op::Load: return f(*e, mapIndexLoads(e->a, f));
    default: {
      auto n = std::make_shared<IndexNode>(*e);
      n->a = mapIndexLoads(e->a, f);
      n->b = mapIndexLoads(e->b, f);
      return n;
    }
  }
}

void forEachVar(const Idx& e, const std::function<void(int)>& f) {
  if (e->op == Op::Var) f(e->var);
  if (e->a) forEachVar(e->a, f);
  if (e->b) forEachVar(e->b, f);
}

int64_t evaluate(const Idx& e, const std::vector<int64_t>& env, const IndexLoader* load) {
  switch (e->op) {
    case Op::Const: return e->value;
    case Op::Var: return env[e->var];
    case Op::Add: return evaluate(e->a, env, load) + evaluate(e->b, env, load);
    case Op::Mul: return evaluate(e->a, env, load) * evaluate(e->b, env, load);
    case Op::FloorDiv: return floorDivInt(evaluate(e->a, env, load), evaluate(e->b, env, load));
    case Op::Mod: return floorModInt(evaluate(e->a, env, load), evaluate(e->b, env, load));
    case Op::Min: return std::min(evaluate(e->a, env, load), evaluate(e->b, env, load));
    case Op::Max: return std::max(evaluate(e->a, env, load), evaluate(e->b, env, load));
    case Op::Load:
      KILN_ASSERT(load, "index {} reads memory but no loader was given", e->name);
      return (*load)(e->buffer, evaluate(e->a, env, load));
    case Op::Xor: return evaluate(e->a, env, load) ^ evaluate(e->b, env, load);
    case Op::Shl: return static_cast<int64_t>(static_cast<uint64_t>(evaluate(e->a, env, load)) << evaluate(e->b, env, load));
    case Op::Shr: return evaluate(e->a, env, load) >> evaluate(e->b, env, load);
  }
  return 0;
}

namespace {
// Xor and the shifts bind more loosely than + in C; their non-atomic operands are always parenthesized.
int precedence(Op op) {
  switch (op) {
    case Op::Xor:
    case Op::Shl:
    case Op::Shr: return 0;
    case Op::Add: return 1;
    case Op::Mul:
    case Op::FloorDiv:
    case Op::Mod: return 2;
    default: return 3;
  }
}
}  // namespace

std::string toString(const Idx& e, bool c) {
  auto sub = [&](const Idx& x, int parentPrec) {
    std::string s = toString(x, c);
    return precedence(x->op) < parentPrec || (x->op != Op::Mul && precedence(x->op) == 2 && parentPrec == 2)
               ? "(" + s + ")"
               : s;
  };
  switch (e->op) {
    case Op::Const: return std::to_string(e->value);
    case Op::Var: return e->name;
    case Op::Add: {
      if (auto k = constValue(e->b); k && *k < 0) return fmt::format("{} - {}", sub(e->a, 1), -*k);
      return fmt::format("{} + {}", sub(e->a, 1), sub(e->b, 1));
    }
    case Op::Mul: return fmt::format("{}*{}", sub(e->a, 2), sub(e->b, 3));
    // Index values are never negative in kiln's kernels, so C's / and % equal floordiv and mod there.
    case Op::FloorDiv: return fmt::format(fmt::runtime(c ? "{} / {}" : "{} floordiv {}"), sub(e->a, 2), sub(e->b, 3));
    case Op::Mod: return fmt::format(fmt::runtime(c ? "{} % {}" : "{} mod {}"), sub(e->a, 2), sub(e->b, 3));
    case Op::Min: return fmt::format("min({}, {})", toString(e->a, c), toString(e->b, c));
    case Op::Max: return fmt::format("max({}, {})", toString(e->a, c), toString(e->b, c));
    case Op::Load: return fmt::format(fmt::runtime(c ? "(int){}[{}]" : "{}[{}]"), e->name, toString(e->a, c));
    case Op::Xor: return fmt::format("{} ^ {}", sub(e->a, 3), sub(e->b, 3));
    case Op::Shl: return fmt::format("{} << {}", sub(e->a, 3), sub(e->b, 3));
    case Op::Shr: return fmt::format("{} >> {}", sub(e->a, 3), sub(e->b, 3));
  }
  return "?";
}

Idx rowMajor(const std::vector<Idx>& index, const std::vector<int64_t>& shape, const VarExtents& extents) {
  Idx flat = idxConst(0);
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    flat = flat + index[d] * idxConst(stride);
    stride *= shape[d];
  }
  return simplify(flat, extents);
}

}  // namespace kiln
