// kernel-launch-only-changes: a kernel that does nothing but where one of its index variables equals a value no thread
// index changes launches only the threads where it does.
//
//   i0 = blockIdx.x*128 + threadIdx.x; p2 = (i0 floordiv 8) mod 2048; ...
//   if (pos[0] < p2 + 1) { if (p2 < pos[0] + 1) { ...store... } }          grid(512)
//   becomes  j = blockIdx.x*128 + threadIdx.x; i0 = j mod 8 + pos[0]*8 + (j floordiv 8)*16384; p2 = ...
//   if (j < 32) { if (-1 < pos[0]) { if (pos[0] < 2048) { if (pos[0] < p2 + 1) { ... } } } }   grid(1)
//
// Why: after kernel-store-only-changes a decoder step's cache write stores one token's row, but its grid still spans
// the cache: 512 blocks a cache at 2,048 positions, each thread comparing its row with the position. The narrowed
// kernel is one block, small enough to run inside the kernel before it (kernel-finish-in-last-block).
//
// The rule, on a kernel with a one-dimensional grid and block (no clusters, no packed groups) whose body is index
// definitions, then one condition holding everything else, a chain of conditions each the only statement of the one
// before it: the chain holds both v < x + 1 and x < v + 1 for an index variable x and an index v that reads no variable
// (a value in memory, as pos[0], or a constant); x is defined as (f floordiv S) mod E, f mod E or f floordiv S (E the
// rest of the range), where f is defined as blockIdx.x*B + threadIdx.x, B the block's width; the flat range N = grid*B
// is a multiple of S*E, and threadIdx.x and blockIdx.x appear nowhere else (but in a definition of blockIdx.x's value
// that f reads). Then the threads with x = v are those whose f is (j mod S) + v*S + (j floordiv S)*S*E for j in
// [0, N / E): f is defined so from j = blockIdx.x*B + threadIdx.x, the grid becomes ceil(N / E / B) blocks, and what the
// chain held is kept under j < N / E (where the block does not divide N / E) and 0 <= v < E (outside it no thread had
// x = v). Where N / E is less than B and the body holds no barrier or shuffle, the block shrinks to the whole warps
// N / E fills (a cache write's 32 or 64 threads fit the narrowest product they may run inside).
#include <algorithm>
#include <optional>
#include <set>

#include "kiln/kernel/lower.h"
#include "bodies.h"

namespace kiln::kernel {
namespace {

using Op = IndexNode::Op;

bool isVar(const Idx& e, int var) { return e && e->op == Op::Var && e->var == var; }

bool isThreadOrBlock(int v, const std::vector<int>& blockVars) {
  return v == kThreadIdx || v == kBlockIdx || std::find(blockVars.begin(), blockVars.end(), v) != blockVars.end();
}

// Whether e reads threadIdx.x, blockIdx.x or a variable in `blockVars`.
bool readsThreadOrBlock(const Idx& e, const std::vector<int>& blockVars) {
  bool found = false;
  forEachVar(e, [&](int v) { found = found || isThreadOrBlock(v, blockVars); });
  return found;
}

// Whether a statement of body reads one, in an index or inside a float expression (a load's index).
bool readsThreadOrBlock(const Block& body, const std::vector<int>& blockVars) {
  std::set<int> vars;
  varsRead(body, vars);
  return std::any_of(vars.begin(), vars.end(), [&](int v) { return isThreadOrBlock(v, blockVars); });
}

// The block index `value` reads if it is blockIdx.x*width + threadIdx.x (blockIdx.x itself or a variable of
// `blockVars` defined as it), null otherwise.
Idx flatThreadIndexBlock(const Idx& value, int64_t width, const std::vector<int>& blockVars) {
  if (!value || value->op != Op::Add) return nullptr;
  if (!isVar(value->a, kThreadIdx) && !isVar(value->b, kThreadIdx)) return nullptr;
  const Idx& product = isVar(value->b, kThreadIdx) ? value->a : value->b;
  if (!product || product->op != Op::Mul) return nullptr;
  const auto isBlock = [&](const Idx& e) {
    if (!e || e->op != Op::Var) return false;
    return e->var == kBlockIdx || std::find(blockVars.begin(), blockVars.end(), e->var) != blockVars.end();
  };
  const Idx& block = isBlock(product->a) ? product->a : product->b;
  const std::optional<int64_t> w = constValue(isBlock(product->a) ? product->b : product->a);
  return isBlock(block) && w && *w == width ? block : nullptr;
}

// x's definition as a digit of f: (f floordiv stride) mod extent, extent 0 where there is no mod (the top digit).
struct Digit {
  int flat = -1;
  int64_t stride = 1, extent = 0;
};

std::optional<Digit> digitOf(const Idx& value) {
  Digit d;
  Idx inner = value;
  if (value->op == Op::Mod) {
    const std::optional<int64_t> e = constValue(value->b);
    if (!e) return std::nullopt;
    d.extent = *e;
    inner = value->a;
  }
  if (inner->op == Op::FloorDiv) {
    const std::optional<int64_t> s = constValue(inner->b);
    if (!s || *s <= 0) return std::nullopt;
    d.stride = *s;
    inner = inner->a;
  }
  if (inner->op != Op::Var || (d.extent == 0 && d.stride == 1)) return std::nullopt;
  d.flat = inner->var;
  return d;
}

// The chain of conditions from `s` on, each the only statement of the one before: its comparisons, lhs < rhs.
std::vector<std::pair<Idx, Idx>> chainComparisons(const Stmt& s) {
  std::vector<std::pair<Idx, Idx>> out;
  const Stmt* at = &s;
  while (at->kind == Stmt::Kind::If) {
    out.emplace_back(at->as<op::If>().lhs, at->as<op::If>().rhs);
    if (at->body.size() != 1) break;
    at = &at->body.front();
  }
  return out;
}

// The variable x and value v the comparisons pin (both v < x + 1 and x < v + 1), v reading no variable.
std::optional<std::pair<int, Idx>> pinned(const std::vector<std::pair<Idx, Idx>>& comparisons) {
  const VarExtents none;
  for (const auto& [lhs, rhs] : comparisons) {
    if (lhs->op != Op::Var) continue;
    const Idx v = simplify(idxAdd(rhs, -1), none);
    bool constantValue = true;
    forEachVar(v, [&](int) { constantValue = false; });
    if (!constantValue) continue;
    const Idx xPlusOne = simplify(idxAdd(lhs, 1), none);
    for (const auto& [l2, r2] : comparisons)
      if (sameIdx(simplify(l2, none), v) && sameIdx(simplify(r2, none), xPlusOne)) return std::make_pair(lhs->var, v);
  }
  return std::nullopt;
}

bool launchOnlyChanges(Kernel& k) {
  if (k.grid[1] != 1 || k.grid[2] != 1 || k.block[1] != 1 || k.block[2] != 1 || k.cluster != 1 || k.groups != 1) return false;
  size_t defs = 0;
  while (defs < k.body.size() && k.body[defs].kind == Stmt::Kind::DefIdx) ++defs;
  if (defs + 1 != k.body.size() || k.body.back().kind != Stmt::Kind::If) return false;
  const auto pin = pinned(chainComparisons(k.body.back()));
  if (!pin) return false;
  const auto& [x, v] = *pin;
  std::vector<int> blockVars;
  int flatDef = -1, xDef = -1;
  Idx blockRead;
  for (size_t i = 0; i < defs; ++i) {
    const auto& d = k.body[i].as<op::DefIdx>();
    if (isVar(d.value, kBlockIdx)) blockVars.push_back(d.var);
    if (d.var == x) xDef = static_cast<int>(i);
  }
  if (xDef < 0) return false;
  const std::optional<Digit> digit = digitOf(k.body[static_cast<size_t>(xDef)].as<op::DefIdx>().value);
  if (!digit) return false;
  for (size_t i = 0; i < defs; ++i) {
    const auto& d = k.body[i].as<op::DefIdx>();
    if (d.var != digit->flat) continue;
    blockRead = flatThreadIndexBlock(d.value, k.block[0], blockVars);
    if (blockRead) flatDef = static_cast<int>(i);
  }
  if (flatDef < 0) return false;
  for (size_t i = 0; i < defs; ++i) {  // threadIdx and blockIdx reach the body through f alone
    const auto& d = k.body[i].as<op::DefIdx>();
    const bool isBlockVar = std::find(blockVars.begin(), blockVars.end(), d.var) != blockVars.end();
    if (static_cast<int>(i) != flatDef && !isBlockVar && readsThreadOrBlock(d.value, blockVars)) return false;
  }
  if (readsThreadOrBlock(Block{k.body.back()}, blockVars)) return false;
  const int64_t n = k.grid[0] * k.block[0], stride = digit->stride;
  const int64_t extent = digit->extent > 0 ? digit->extent : n / stride;
  if (extent <= 1 || n % (stride * extent) != 0) return false;
  const int64_t points = n / extent;
  // Fewer threads than a block: the block shrinks to the whole warps they fill, unless a barrier or shuffle needs the
  // block's width.
  const int64_t width = points < k.block[0] && !hasCollectives(k.body) ? (points + 31) / 32 * 32 : k.block[0];
  const int j = maxVar(k.body) + 1;
  const Idx jv = idxVar(j, "j");
  auto& flat = k.body[static_cast<size_t>(flatDef)].as<op::DefIdx>();
  Stmt jDef = defIdx(j, "j", idxMul(blockRead, width) + threadIdx());
  flat.value = mod(jv, stride) + idxMul(v, stride) + idxMul(floorDiv(jv, stride), stride * extent);
  k.body.insert(k.body.begin() + flatDef, std::move(jDef));
  Block guarded{std::move(k.body.back())};
  guarded = {ifLess(v, idxConst(extent), std::move(guarded))};
  guarded = {ifLess(idxConst(-1), v, std::move(guarded))};
  if (points % width != 0) guarded = {ifLess(jv, idxConst(points), std::move(guarded))};
  k.body.back() = std::move(guarded.front());
  k.grid[0] = (points + width - 1) / width;
  k.block[0] = width;
  return true;
}

}  // namespace

bool launchOnlyChanges(Program& p) {
  bool changed = false;
  for (Kernel& k : p.kernels) changed = launchOnlyChanges(k) || changed;
  return changed;
}

}  // namespace kiln::kernel
