#include "verifier_ranges.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace kiln::kernel::detail {
namespace {

constexpr int64_t kBig = int64_t{1} << 40;  // beyond this, interval arithmetic gives up (no overflow)

std::optional<Range> checked(int64_t lo, int64_t hi) {
  if (lo < -kBig || hi > kBig || lo > hi) return std::nullopt;
  return Range{lo, hi};
}


// Interval of e. `ranges` bounds variables; `defs` (when given) lets DefIdx variables be replaced by their
// definitions, which keeps the correlation between e.g. `t = threadIdx.x` and threadIdx.x itself.
}  // namespace

int64_t floorDivI(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

std::optional<Range> interval(const Idx& e, const Ranges& ranges, const std::map<int, Idx>* defs) {
  using Op = IndexNode::Op;
  switch (e->op) {
    case Op::Const: return Range{e->value, e->value};
    case Op::Var: {
      if (defs) {
        if (auto it = defs->find(e->var); it != defs->end()) return interval(it->second, ranges, defs);
      }
      if (auto it = ranges.find(e->var); it != ranges.end()) return it->second;
      return std::nullopt;
    }
    case Op::Load: return std::nullopt;  // a value read from memory: unbounded
    default: break;
  }
  auto ra = interval(e->a, ranges, defs);
  if (!ra) return std::nullopt;
  auto rb = interval(e->b, ranges, defs);
  if (!rb) return std::nullopt;
  auto [alo, ahi] = *ra;
  auto [blo, bhi] = *rb;
  switch (e->op) {
    case Op::Add: return checked(alo + blo, ahi + bhi);
    case Op::Mul: {
      int64_t c[4] = {alo * blo, alo * bhi, ahi * blo, ahi * bhi};
      return checked(*std::min_element(c, c + 4), *std::max_element(c, c + 4));
    }
    case Op::FloorDiv:
      if (blo <= 0) return std::nullopt;  // only positive divisors are bounded
      return checked(std::min(floorDivI(alo, blo), floorDivI(alo, bhi)), std::max(floorDivI(ahi, blo), floorDivI(ahi, bhi)));
    case Op::Mod:
      if (blo <= 0) return std::nullopt;
      if (blo == bhi && alo >= 0 && ahi < blo) return Range{alo, ahi};
      if (blo == bhi && floorDivI(alo, blo) == floorDivI(ahi, blo)) {
        int64_t base = floorDivI(alo, blo) * blo;
        return Range{alo - base, ahi - base};
      }
      return Range{0, bhi - 1};
    case Op::Min: return Range{std::min(alo, blo), std::min(ahi, bhi)};
    case Op::Max: return Range{std::max(alo, blo), std::max(ahi, bhi)};
    case Op::Xor: {
      if (alo < 0 || blo < 0) return std::nullopt;
      int64_t top = 1;
      while (top <= std::max(ahi, bhi)) top *= 2;
      return Range{0, top - 1};
    }
    case Op::Shl:
      if (blo != bhi || blo < 0 || blo > 24) return std::nullopt;
      return checked(alo * (int64_t{1} << blo), ahi * (int64_t{1} << blo));
    case Op::Shr:
      if (blo != bhi || blo < 0) return std::nullopt;
      return Range{alo >> blo, ahi >> blo};
    default: return std::nullopt;
  }
}

std::optional<Range> enumeratedBound(const Idx& e, const Ranges& ranges) {
  std::vector<std::pair<int, Range>> vars;
  bool unbounded = false, loads = false;
  forEachVar(e, [&](int v) {
    auto r = ranges.find(v);
    if (v < 0 || r == ranges.end()) unbounded = true;
    else if (std::none_of(vars.begin(), vars.end(), [&](const auto& p) { return p.first == v; })) vars.push_back({v, r->second});
  });
  forEachIndexLoad(e, [&](const IndexNode&) { loads = true; });
  if (unbounded || loads || vars.empty()) return std::nullopt;
  int64_t combinations = 1, top = 0;
  for (const auto& [v, r] : vars) {
    combinations *= r.second - r.first + 1;
    if (combinations > kEnumeratedCombinations) return std::nullopt;
    top = std::max<int64_t>(top, v);
  }
  std::vector<int64_t> env(static_cast<size_t>(top) + 1, 0);
  Range out{std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
  for (int64_t c = 0; c < combinations; ++c) {
    int64_t rest = c;
    for (const auto& [v, r] : vars) {
      const int64_t n = r.second - r.first + 1;
      env[static_cast<size_t>(v)] = r.first + rest % n;
      rest /= n;
    }
    const int64_t value = evaluate(e, env);
    out = {std::min(out.first, value), std::max(out.second, value)};
  }
  return out;
}

std::optional<Range> intersect(std::optional<Range> a, std::optional<Range> b) {
  if (!a) return b;
  if (!b) return a;
  return Range{std::max(a->first, b->first), std::min(a->second, b->second)};
}

bool provablyEven(const Idx& e) {
  switch (e->op) {
    case IndexNode::Op::Const: return e->value % 2 == 0;
    case IndexNode::Op::Mul: return provablyEven(e->a) || provablyEven(e->b);
    case IndexNode::Op::Add: return provablyEven(e->a) && provablyEven(e->b);
    default: return false;
  }
}

std::optional<AffineVar> affineVar(const Idx& e) {
  using Op = IndexNode::Op;
  if (e->op == Op::Var) return AffineVar{e->var, 1, 0};
  if (e->op == Op::Mul && e->a->op == Op::Var && constValue(e->b) && *constValue(e->b) > 0)
    return AffineVar{e->a->var, *constValue(e->b), 0};
  if (e->op == Op::Add && constValue(e->b))
    if (auto inner = affineVar(e->a); inner && inner->constant == 0) return AffineVar{inner->var, inner->coef, *constValue(e->b)};
  return std::nullopt;
}

}  // namespace kiln::kernel::detail
