// tile-vectorize-accesses: memory-bound kernels move 16 bytes per access and size their rows by their length.
//
// * Pointwise maps without reductions (silu·mul, residual adds, casts): each thread computes `vector` = 16 bytes of
//   output (8 bf16/f16, 4 f32) consecutive along the innermost axis, when that axis divides; loads that read those
//   points consecutively become vector loads in the lowering, the store one vector store. Blocks shrink (to 64
//   threads) until the grid covers every SM twice, where the kernel is that large; beyond one resident wave of
//   blocks a thread takes two vectors, their loads issued together, if it then holds at most 16 loaded values.
// * Row reductions whose row is one axis that every stage reduces over (RMSNorm, softmax, LayerNorm): rows are read
//   as vectors of 16 bytes (as far as the row divides); threadsPerRow is the smallest power of two that still
//   gives every thread one vector, halved while the rows would more than fill the Target's resident threads and
//   each thread keeps at most kMaxVectorsPerThread vectors (kMaxF32VectorsPerThread for f32 rows); rows narrower than a warp share one (shuffles over
//   their lanes only), and short rows share a block (rowsPerBlock: whole warps, up to 128 threads while the
//   grid still covers every SM, a divisor of the rows); the row's vectors stay in registers (read once for every stage and
//   the write) when a thread holds at most kMaxVectorsPerThread of them.
// Precondition: tile-cooperative-reduce has chosen row reductions. Postcondition: the verifier's vector rules
// (powers of two, 16 bytes of output, dividing the innermost extent).
#include <algorithm>
#include <set>

#include "kiln/tile/layout.h"

namespace kiln::tile {
namespace {

constexpr int64_t kMaxVectorsPerThread = 8;
// Vectors per thread the thread count of an f32 row is halved down to (16-bit rows: kMaxVectorsPerThread): f32 rows of
// 512 ran faster with 4 vectors a thread than with 8 (TinyLlama's softmax 16.5 against 17.6 us), while bf16 rows of 512
// keep 8. (measurements: docs/history.md, "16-byte accesses (`tile-vectorize-accesses`)")
constexpr int64_t kMaxF32VectorsPerThread = 4;
// Loaded values (f32 registers) a pointwise thread may hold before computing: more vectors per thread beyond this
// cost occupancy (registers) and leave a partial wave of blocks.
constexpr int64_t kMaxLoadedValuesPerThread = 16;

// Distinct loads of one evaluation of e (a value loaded twice is loaded once).
int64_t distinctLoads(const loop::ExprP& e) {
  std::set<std::string> keys;
  loop::forEachLoad(e, [&](const loop::Expr& load) {
    keys.insert(loop::exprKey(std::make_shared<loop::Expr>(load)));
  });
  return static_cast<int64_t>(keys.size());
}

bool vectorType(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

// The widest power of two of at most 16 bytes of `out` that divides `extent`.
int64_t vectorWidth(DType out, int64_t extent) {
  if (!vectorType(out)) return 1;
  int64_t v = Target::kVectorBytes / dtypeBytes(out);
  while (v > 1 && extent % v != 0) v /= 2;
  return v;
}

bool rowForm(const loop::Kernel& k) {
  if (static_cast<size_t>(k.rowAxes) + 1 != k.parallel.size() || k.stages.empty()) return false;
  const int64_t width = rowWidth(k);
  for (auto& st : k.stages)
    if (st.axes.size() != 1 || st.axes[0].extent != width) return false;
  return true;
}

}  // namespace

bool vectorizePointwise(const Target& target, const loop::Program& p, const loop::Kernel& k, PointwiseMap& m) {
  if (!k.stages.empty() || k.parallel.empty() || m.vector != 1) return false;
  const int64_t v = vectorWidth(p.buffers[static_cast<size_t>(k.output)].dtype, k.parallel.back().extent);
  if (v == 1) return false;
  m.vector = v;
  // Blocks small enough that the vectors spread over every SM twice where there are that many.
  const int64_t threadsNeeded = k.parallelPoints() / v;
  while (m.threads > 64 && threadsNeeded < 2 * target.smCount * m.threads) m.threads /= 2;
  // Whole warps: halving a block of 192 threads (tile-lower-from-loop's, for 192 points) would leave 48.
  m.threads = (std::min<int64_t>(m.threads, threadsNeeded) + 31) / 32 * 32;
  // Beyond one resident wave of blocks, each thread takes two vectors (twice the loads in flight, half the
  // blocks), where the values it then holds stay within kMaxLoadedValuesPerThread: a bf16 SiLU·mul holding
  // two vectors of both operands (32 values, 47 registers) fits 5 blocks of 256 threads on an SM, and its 704
  // blocks then take 1.07 waves (measurements: docs/history.md, "16-byte accesses (`tile-vectorize-accesses`)").
  const int64_t blocks = (threadsNeeded + m.threads - 1) / m.threads;
  if (blocks > target.smCount * (target.maxThreadsPerSm / m.threads) &&
      2 * v * distinctLoads(k.result) <= kMaxLoadedValuesPerThread)
    m.vectorsPerThread = 2;
  return true;
}

bool vectorizeAccesses(Program& p) {
  bool changed = false;
  const Target& target = p.target;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    const loop::Kernel& k = p.loop.kernels[i];
    const DType out = p.loop.buffers[static_cast<size_t>(k.output)].dtype;
    if (auto* m = std::get_if<PointwiseMap>(&p.schedules[i])) {
      changed = vectorizePointwise(target, p.loop, k, *m) || changed;
      continue;
    }
    auto* r = std::get_if<RowReduction>(&p.schedules[i]);
    if (!r || r->vector != 1 || r->rowInRegisters || !rowForm(k)) continue;
    const int64_t rows = rowsOf(k), vector = vectorWidth(out, rowWidth(k)), vectors = rowWidth(k) / vector;
    int64_t threads = 1;
    while (threads < vectors && threads < target.maxThreadsPerBlock) threads *= 2;
    const int64_t resident = target.smCount * target.maxThreadsPerSm;
    const int64_t fewest = dtypeBytes(out) >= 4 ? kMaxF32VectorsPerThread : kMaxVectorsPerThread;
    while (threads > 1 && rows * threads > resident && (vectors + threads / 2 - 1) / (threads / 2) <= fewest)
      threads /= 2;
    // Rows narrower than a warp share one: the block holds whole warps, and more rows while the grid still
    // covers every SM (at most 128 threads); the rows per block must divide the rows.
    int64_t rowsPerBlock = std::max<int64_t>(1, Target::kWarpSize / threads);
    if (rows % rowsPerBlock != 0) {
      threads = Target::kWarpSize;
      rowsPerBlock = 1;
    }
    while (threads * rowsPerBlock * 2 <= 128 && rows % (rowsPerBlock * 2) == 0 && rows / (rowsPerBlock * 2) >= target.smCount)
      rowsPerBlock *= 2;
    r->threadsPerRow = threads;
    r->rowsPerBlock = rowsPerBlock;
    r->vector = vector;
    r->combine = RowReduction::Combine::WarpShuffle;
    r->rowInRegisters = (vectors + threads - 1) / threads <= kMaxVectorsPerThread;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
