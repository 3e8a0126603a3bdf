// tile-vectorize-reductions: row reductions whose rows are one point and whose every stage reduces one axis that a
// 16-bit or f32 load reads consecutively -- matrix-vector products: a decoder step's projections and its LM head --
// walk that axis by vectors of 16 bytes (RowReduction::reductionVector), a warp per row where the rows are many (no
// shared memory, no barrier: the warp's shuffles combine the row), 256 threads to a block.
//
// tile-cooperative-reduce gives such a product a block of 256 threads per output reading one element per access: on a
// decoder step's products each thread issued eight 2-byte loads of the weight row, one block-wide combine per output.
// Precondition: tile-cooperative-reduce has chosen the row reductions; runs after tile-vectorize-accesses (which
// vectorizes the rows of row-form kernels, never these). Postcondition: the verifier's reduction-vector rules (a power
// of two of at most 8 elements dividing every stage's one axis, only with vector 1 and the row not in registers).
#include <algorithm>

#include "kiln/tile/layout.h"

namespace kiln::tile {
namespace {

// 16 bytes of a load of type t, in elements (1: a type moved one element at a time).
int64_t elementsOf16Bytes(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16 ? Target::kVectorBytes / dtypeBytes(t) : 1;
}

// Whether `load` reads `vector` consecutive elements, the first at a multiple of `vector`, at positions c * vector ..
// c * vector + vector - 1 of the reduction axis `axis` (c any vector of the axis; the kernel's other variables any
// point within their extents): what a 16-byte load of the lowering needs.
bool readsVectors(const loop::Program& p, const loop::Kernel& k, const loop::Expr& load, const loop::Axis& axis, int64_t vector) {
  VarExtents extents = k.extents();
  const int c = k.maxVar() + 1;
  extents[c] = axis.extent / vector;
  auto flatAt = [&](int64_t v) {
    std::vector<Idx> index;
    const Idx at = idxVar(c, "c") * idxConst(vector) + idxConst(v);
    for (const Idx& i : load.index) index.push_back(substitute(i, [&](int var, const std::string&) { return var == axis.var ? at : nullptr; }));
    return rowMajor(index, p.buffers[static_cast<size_t>(load.buffer)].shape, extents);
  };
  const Idx first = flatAt(0);
  for (int64_t v = 1; v < vector; ++v) {
    const std::optional<int64_t> step = constValue(simplify(flatAt(v) + idxMul(first, -1), extents));
    if (!step || *step != v) return false;
  }
  return provablyMultipleOf(first, vector, extents);
}

// The reduction vector of a row reduction whose rows are one point and whose every stage reduces one axis that each of
// its loads along the axis reads as vectors (16-bit or f32 values: a product's activations and weight row): 16 bytes
// of the narrowest such load, halved until every load reads it as vectors, it divides the axis and leaves a warp of
// vectors. 1 where there is no such vector.
int64_t reductionVectorOf(const loop::Program& p, const loop::Kernel& k) {
  if (k.stages.empty() || rowWidth(k) != 1) return 1;
  int64_t vector = Target::kVectorBytes / 2;
  for (const loop::Reduction& st : k.stages) {
    if (st.axes.size() != 1) return 1;
    std::vector<const loop::Expr*> along;
    int64_t widest = 1;
    loop::forEachLoad(st.value, [&](const loop::Expr& load) {
      if (!loop::usesVar(load, st.axes[0].var)) return;
      along.push_back(&load);
      widest = std::max(widest, elementsOf16Bytes(p.buffers[static_cast<size_t>(load.buffer)].dtype));
    });
    if (along.empty()) return 1;
    vector = std::min(vector, widest);
    auto fits = [&](int64_t v) {
      if (st.axes[0].extent % v != 0 || st.axes[0].extent / v < Target::kWarpSize) return false;
      for (const loop::Expr* load : along)
        if (elementsOf16Bytes(p.buffers[static_cast<size_t>(load->buffer)].dtype) == 1 || !readsVectors(p, k, *load, st.axes[0], v))
          return false;
      return true;
    };
    while (vector > 1 && !fits(vector)) vector /= 2;
  }
  return vector;
}

// Rows of one point read by vectors: a warp per row while the rows give every SM a block of 256 threads' worth,
// else wider rows (up to 256 threads, each still taking two vectors); then as many rows per block (up to 256
// threads) as keep a block on every SM.
bool vectorizeReduction(const Target& target, const loop::Program& p, const loop::Kernel& k, RowReduction& r) {
  if (r.vector != 1 || r.rowInRegisters || r.reductionVector != 1) return false;
  const int64_t vector = reductionVectorOf(p, k);
  if (vector == 1) return false;
  int64_t shortest = k.stages[0].axes[0].extent;
  for (const loop::Reduction& st : k.stages) shortest = std::min(shortest, st.axes[0].extent);
  const int64_t rows = rowsOf(k), vectors = shortest / vector, blockThreads = 256;
  int64_t threads = Target::kWarpSize;
  while (threads < blockThreads && rows * threads < target.smCount * blockThreads && vectors >= 4 * threads) threads *= 2;
  int64_t rowsPerBlock = 1;
  while (threads * rowsPerBlock * 2 <= blockThreads && rows % (rowsPerBlock * 2) == 0 && rows / (rowsPerBlock * 2) >= target.smCount)
    rowsPerBlock *= 2;
  r.reductionVector = vector;
  r.threadsPerRow = threads;
  r.rowsPerBlock = rowsPerBlock;
  r.combine = RowReduction::Combine::WarpShuffle;
  return true;
}

}  // namespace

bool vectorizeReductions(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i)
    if (auto* r = std::get_if<RowReduction>(&p.schedules[i])) changed = vectorizeReduction(p.target, p.loop, p.loop.kernels[i], *r) || changed;
  return changed;
}

}  // namespace kiln::tile
