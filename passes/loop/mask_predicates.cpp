// loop-mask-predicates: loads of a constant attention mask become comparisons of the indices they are read at.
//
// Hugging Face models build their causal and sliding-window masks from arange comparisons that tensor-fold-constants
// evaluates into a weight: [.., queries, keys] of 0 where query x may see key y and one large negative value M
// elsewhere. Read as a weight, it costs a load per score (an f32 mask read 32 MB at 512 tokens) and hides from later
// passes which keys each query sees. A weight qualifies when every slice over its leading dimensions is the same and row
// x's zeros are exactly the keys y with x + lo <= y < x + hi (clipped to the row; lo and hi the same for every row,
// either side possibly absent), all other values are one M, and no row is all M. A load of it at [.., x, y] becomes
//   select(y < x + hi, select(y < x + lo, M, 0), M)
// (a side that never binds left out; a mask of zeros is the immediate 0): the same values, computed from the indices.
// loop-fuse-attention's flash schedule reads the bounds off these selects (loop::keyBounds) and skips the keys no
// row of a block can see.
#include <map>
#include <optional>

#include "kiln/loop/ir.h"

namespace kiln::loop {
namespace {

struct Band {
  std::optional<int64_t> lo, hi;  // zeros at x + lo <= y < x + hi
  float masked = 0.f;
};

std::optional<Band> bandOf(const Buffer& b) {
  if (b.kind != Buffer::Kind::Weight || !b.weight || b.shape.size() < 2) return std::nullopt;
  const int64_t rows = b.shape[b.shape.size() - 2], cols = b.shape.back(), slice = rows * cols;
  const std::vector<float>& w = b.weight->values;
  if (slice == 0 || static_cast<int64_t>(w.size()) % slice != 0) return std::nullopt;
  for (size_t i = static_cast<size_t>(slice); i < w.size(); ++i)
    if (w[i] != w[i % static_cast<size_t>(slice)]) return std::nullopt;
  Band band;
  std::optional<float> masked;
  // Each row's zeros must be one run [first, last]; record the offsets where the run is clipped by the mask, not the row.
  std::optional<int64_t> lo, hi;
  for (int64_t x = 0; x < rows; ++x) {
    int64_t first = -1, last = -1;
    for (int64_t y = 0; y < cols; ++y) {
      float v = w[static_cast<size_t>(x * cols + y)];
      if (v == 0.f) {
        if (first < 0) first = y;
        else if (last != y - 1) return std::nullopt;
        last = y;
        continue;
      }
      if (!(v <= -1e30f) || (masked && *masked != v)) return std::nullopt;
      masked = v;
    }
    if (first < 0) return std::nullopt;  // a row that sees nothing: softmax over M's is uniform, not a predicate
    if (first > 0) {
      if (lo && *lo != first - x) return std::nullopt;
      lo = first - x;
    }
    if (last < cols - 1) {
      if (hi && *hi != last + 1 - x) return std::nullopt;
      hi = last + 1 - x;
    }
  }
  // Rows where a side did not bind must agree with it: first == max(0, x + lo), last + 1 == min(cols, x + hi).
  for (int64_t x = 0; x < rows; ++x) {
    int64_t first = lo ? std::max<int64_t>(0, x + *lo) : 0, end = hi ? std::min<int64_t>(cols, x + *hi) : cols;
    for (int64_t y = 0; y < cols; ++y)
      if ((w[static_cast<size_t>(x * cols + y)] == 0.f) != (y >= first && y < end)) return std::nullopt;
  }
  band.lo = lo;
  band.hi = hi;
  band.masked = masked.value_or(0.f);
  return band;
}

ExprP predicate(const Band& band, const Expr& load, const VarExtents& ext) {
  const Idx& x = load.index[load.index.size() - 2];
  const Idx& y = load.index.back();
  ExprP value = imm(0.f);
  if (band.lo) value = select(y, simplify(idxAdd(x, *band.lo), ext), imm(band.masked), value);
  if (band.hi) value = select(y, simplify(idxAdd(x, *band.hi), ext), value, imm(band.masked));
  return value;
}

}  // namespace

bool maskPredicates(Program& p) {
  std::map<int, std::optional<Band>> bands;
  auto band = [&](int buffer) -> const std::optional<Band>& {
    auto it = bands.find(buffer);
    if (it == bands.end()) it = bands.emplace(buffer, bandOf(p.buffers[static_cast<size_t>(buffer)])).first;
    return it->second;
  };
  bool changed = false;
  for (Kernel& k : p.kernels) {
    const VarExtents ext = k.extents();
    mapKernelExprs(k, [&](const ExprP& e) {
      return mapLoads(e, [&](const Expr& l) -> ExprP {
        const std::optional<Band>& b = band(l.buffer);
        if (!b) return std::make_shared<Expr>(l);
        changed = true;
        return predicate(*b, l, ext);
      });
    });
  }
  return changed;
}

}  // namespace kiln::loop
