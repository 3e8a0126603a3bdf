// tile-fuse-operand-producers: inlines an elementwise producer into the operand of a tiled matrix product that
// is its only reader (attention's rotary embedding of q and of k into q·kᵀ). The tiled schedule evaluates an
// operand once per element of the slices it stages in shared memory, i.e. once per (row, k) for every tile
// column: the producer's work is repeated ceil(n / tile_n) times for A (ceil(m / tile_m) for B), and the
// fusion is refused when that exceeds loop::kMaxFusionWorkGrowth, the bound of loop-fuse-producers (which,
// before tiling, must assume one evaluation per output and so refuses these). Saves a kernel and a round trip
// of the operand through memory. Into a product on tensor cores only from a producer whose buffer has the
// tensor cores' operand type (their rounding then reproduces the store's).
#include "kiln/tile/contraction.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {
namespace {

int loadsOf(const loop::ExprP& e, int buffer) {
  int n = 0;
  loop::forEachLoad(e, [&](const loop::Expr& l) { n += l.buffer == buffer; });
  return n;
}

// Whether kernel `c` of p may absorb producer `pi` (writing buffer x) into its operands; `readers`: per buffer,
// the kernels that read it (loop::readersOfBuffers).
bool fusible(const Program& p, const std::vector<std::vector<int>>& readers, size_t pi, size_t c) {
  const loop::Kernel& producer = p.loop.kernels[pi];
  const loop::Kernel& k = p.loop.kernels[c];
  const int x = producer.output;
  if (!producer.stages.empty() || p.loop.buffers[x].kind != loop::Buffer::Kind::Temp) return false;
  // Only this kernel reads x, only inside its stages, never as an index.
  if (readers[static_cast<size_t>(x)] != std::vector<int>{static_cast<int>(c)}) return false;
  bool asIndex = false;
  loop::forEachKernelRead(k, [&](int b, bool idx) { asIndex = asIndex || (b == x && idx); });
  if (asIndex || loadsOf(k.result, x) > 0) return false;
  const auto& s = std::get<TiledContraction>(p.schedules[c]);
  auto con = findContraction(k, s.mAxis, s.nAxis);
  if (!con) return false;
  // Tensor cores round their operands to bf16 (f16): exactly what storing the producer's result did only if its
  // buffer has that type.
  if (auto mma = scheduledTensorCoreType(p.schedules[c]); mma && p.loop.buffers[x].dtype != *mma) return false;
  const int64_t nTiles = tilesN(s, *con), mTiles = tilesM(s, *con);
  int64_t evaluations = 0;  // of the producer's result, over the whole tiled kernel
  for (auto& st : con->stages) {
    evaluations += loadsOf(st.a, x) * con->outerPoints * con->m * con->k * nTiles;
    evaluations += loadsOf(st.b, x) * con->outerPoints * con->n * con->k * mTiles;
  }
  return evaluations > 0 && evaluations <= loop::kMaxFusionWorkGrowth * producer.parallelPoints();
}

}  // namespace

bool fuseOperandProducers(Program& p) {
  bool changed = false;
  for (bool again = true; again;) {
    again = false;
    const auto readers = loop::readersOfBuffers(p.loop);
    for (size_t c = 0; c < p.loop.kernels.size() && !again; ++c) {
      if (!std::holds_alternative<TiledContraction>(p.schedules[c])) continue;
      for (size_t pi = 0; pi < c && !again; ++pi) {
        if (!fusible(p, readers, pi, c)) continue;
        loop::Kernel fused = p.loop.kernels[c];
        const loop::Kernel& producer = p.loop.kernels[pi];
        VarExtents ext = fused.extents();
        for (auto& st : fused.stages) st.value = loop::inlineProducer(st.value, producer, ext);
        fused.origins = loop::mergeOrigins(producer.origins, fused.origins);
        const auto& s = std::get<TiledContraction>(p.schedules[c]);
        if (!findContraction(fused, s.mAxis, s.nAxis)) continue;
        p.loop.kernels[c] = std::move(fused);
        p.loop.kernels.erase(p.loop.kernels.begin() + static_cast<std::ptrdiff_t>(pi));
        p.schedules.erase(p.schedules.begin() + static_cast<std::ptrdiff_t>(pi));
        again = changed = true;
      }
    }
  }
  if (changed) loop::eliminateUnusedBuffers(p.loop);  // the producers' buffers; renumbers kernels k0, k1, ...
  return changed;
}

}  // namespace kiln::tile
