#include "kiln/tile/layout.h"

#include <algorithm>

#include "kiln/support/error.h"
#include "kiln/support/overloaded.h"
#include "kiln/support/shared_layout.h"

namespace kiln::tile {
int64_t rowsOf(const loop::Kernel& k) { return k.rowPoints(); }
int64_t rowWidth(const loop::Kernel& k) { return k.parallelPoints() / k.rowPoints(); }

int64_t combineSlots(const RowReduction& r) {
  const int64_t threads = r.threadsPerRow * r.rowsPerBlock;
  if (r.combine == RowReduction::Combine::SharedTree) return threads;
  return r.threadsPerRow <= Target::kWarpSize ? 0 : threads / Target::kWarpSize;  // a warp or less per row: shuffles only
}

int64_t threadsPerBlock(const Schedule& s) {
  return std::visit(Overloaded{
                        [](const PointwiseMap& m) { return m.threads; },
                        [](const RowReduction& r) { return r.threadsPerRow * r.rowsPerBlock; },
                        [](const FlashAttention& f) {
                          return flashOnCudaCores(f) ? 8 * f.blockQ : f.blockQ / f.warpRows * f.keySplit * Target::kWarpSize;
                        },
                        [](const TiledContraction& t) {
                          switch (t.instruction) {
                            case TiledContraction::Instruction::MmaSync: return int64_t{128};
                            case TiledContraction::Instruction::Wgmma:  // a warpgroup per 64 rows, and the producer warp
                              return t.tileM / 64 * 128 + (t.producerWarp ? Target::kWarpSize : 0);
                            default: return (t.tileM / t.microM) * (t.tileN / t.microN);
                          }
                        },
                    },
                    s);
}

int64_t gridBlocks(const Schedule& s, const loop::Kernel& k) {
  return std::visit(Overloaded{
                        [&](const PointwiseMap& m) { return ceilDiv(k.parallelPoints() / m.vector, m.threads * m.vectorsPerThread); },
                        [&](const RowReduction& r) { return ceilDiv(rowsOf(k), r.rowsPerBlock); },
                        [&](const FlashAttention& f) {
                          if (f.packedPairs > 0) return 2 * f.packedPairs;  // two groups a thread block (the blocks seen by its body)
                          if (!f.pairBlocks) return flashQueryBlocksInAll(f, k) * f.keyBlocks;
                          return k.rowPoints() / k.parallel[static_cast<size_t>(f.queryAxis)].extent * ((flashQueryBlocks(f, k) + 1) / 2);
                        },
                        [&](const TiledContraction& t) {
                          if (t.streamBlocks > 0) return t.streamBlocks;  // persistent
                          Contraction c = contractionOf(t, k);
                          return c.outerPoints * tilesM(t, c) * tilesN(t, c);
                        },
                    },
                    s);
}

int64_t flashQueryBlocks(const FlashAttention& f, const loop::Kernel& k) {
  return ceilDiv(k.parallel[static_cast<size_t>(f.queryAxis)].extent, flashRowsTaken(f));
}

int64_t flashQueryBlocksInAll(const FlashAttention& f, const loop::Kernel& k) {
  return k.rowPoints() / k.parallel[static_cast<size_t>(f.queryAxis)].extent * flashQueryBlocks(f, k);
}

int64_t flashPartialValues(const FlashAttention& f, const loop::Kernel& k) {
  const int64_t width = k.parallel[static_cast<size_t>(k.rowAxes)].extent;
  if (flashOnCudaCores(f)) return 2 * 2 + 2 * 4 * ceilDiv(width / 4, 16);  // rows ty, ty + block_q / 2; 4-column chunks
  const int64_t groups = f.warpRows / 16;
  return groups * (2 * 2 + width / 8 * 4);  // per row group: rows g, g + 8; 4 values of every 8-column tile
}

int64_t flashPartialsElements(const FlashAttention& f, const loop::Kernel& k) {
  return gridBlocks(f, k) * flashPartialValues(f, k) * threadsPerBlock(f);
}

FlashSlices flashSlices(const FlashAttention& f, const loop::Kernel& k) {
  KILN_ASSERT(k.attention && k.attention->dot.axes.size() == 1, "kernel {}: flash_attention on a kernel that is not attention", k.name);
  const int64_t depth = k.attention->dot.axes[0].extent, width = k.parallel[static_cast<size_t>(k.rowAxes)].extent;
  const int64_t pad = 16 / dtypeBytes(f.mmaType);  // 16 bytes
  FlashSlices sl{f.blockQ * (depth + pad), f.blockKV * (depth + pad), f.blockKV * (width + pad),
                 depth + pad, width + pad, flashCombineValues(width) * (f.keySplit - 1) * (f.blockQ / 16) * Target::kWarpSize};
  if (flashOnCudaCores(f)) {
    sl.pStride = f.blockKV + pad;
    sl.p = f.blockQ * sl.pStride;
  }
  return sl;
}

int64_t sharedBytes(const Schedule& s, const loop::Kernel& k) {
  if (auto* f = std::get_if<FlashAttention>(&s)) {
    FlashSlices sl = flashSlices(*f, k);
    return (sl.q + f->ring * (sl.k + sl.v)) * dtypeBytes(f->mmaType) + (sl.combine + sl.p) * 4;
  }
  if (auto* r = std::get_if<RowReduction>(&s)) return k.stages.empty() ? 0 : combineSlots(*r) * 4;
  if (auto* t = std::get_if<TiledContraction>(&s))
    return dynamicShared(s) ? t->pipelineDepth * (ringSlotBytes(*t, contractionOf(*t, k)) +
                                                  (t->a.copy == TiledContraction::Copy::Tma ? kMbarrierBytes : 0) +
                                                  (t->cluster > 1 || t->producerWarp ? kMbarrierBytes : 0))  // full (and empty) per slot
                            : operandSliceBytes(*t, static_cast<int64_t>(k.stages.size()), t->tileK);
  return 0;
}

bool dynamicShared(const Schedule& s) {
  if (std::holds_alternative<FlashAttention>(s)) return true;
  auto* t = std::get_if<TiledContraction>(&s);
  return t && (t->a.copy == TiledContraction::Copy::CpAsync || t->a.copy == TiledContraction::Copy::Tma);
}

Contraction contractionOf(const TiledContraction& s, const loop::Kernel& k) {
  auto c = findContraction(k, s.mAxis, s.nAxis);
  KILN_ASSERT(c.has_value(), "kernel {}: tiled_contraction on a kernel that is not a contraction over m_axis={} n_axis={}",
              k.name, s.mAxis, s.nAxis);
  return *c;
}

int64_t tilesM(const TiledContraction& s, const Contraction& c) { return ceilDiv(c.m, s.tileM); }
int64_t tilesN(const TiledContraction& s, const Contraction& c) { return ceilDiv(c.n, s.tileN); }

DType sliceType(const TiledContraction& s, const TiledContraction::Operand& o) {
  return o.layout == TiledContraction::SharedLayout::KMajorF32 || o.layout == TiledContraction::SharedLayout::RowsF32 ? DType::F32
                                                                                                                     : s.mmaType;
}

int64_t sliceElements(const TiledContraction::Operand& o, int64_t rows, int64_t tileK) {
  switch (o.layout) {
    case TiledContraction::SharedLayout::RowPairs: return rows * (tileK + kPairPad);
    case TiledContraction::SharedLayout::RowsF32: return rows * (tileK + kF32RowPad);
    case TiledContraction::SharedLayout::CoreMatrices:
    case TiledContraction::SharedLayout::Swizzled128: return ceilDiv(rows, 8) * 8 * tileK;
    default: return tileK * (rows + 1);
  }
}

Idx sliceSlot(const TiledContraction::Operand& o, const Idx& kk, const Idx& rr, int64_t rows, int64_t tileK) {
  switch (o.layout) {
    case TiledContraction::SharedLayout::RowPairs: return rr * idxConst(tileK + kPairPad) + kk;
    case TiledContraction::SharedLayout::RowsF32: return rr * idxConst(tileK + kF32RowPad) + kk;
    case TiledContraction::SharedLayout::CoreMatrices:
      return floorDiv(rr, 8) * idxConst(8 * tileK) + floorDiv(kk, 8) * idxConst(64) + mod(rr, 8) * idxConst(8) + mod(kk, 8);
    case TiledContraction::SharedLayout::Swizzled128: {  // tile_k = 64: chunk kk / 8 of row rr at chunk (kk / 8) ^ (rr mod 8)
      constexpr Swizzle sw = kSwizzle128B.inElementsOf(2);  // 16-bit operands: rows of 64, chunks of 8
      return rr * idxConst(sw.row()) + idxXor(floorDiv(kk, sw.chunk()), mod(rr, sw.period())) * idxConst(sw.chunk()) +
             mod(kk, sw.chunk());
    }
    default: return kk * idxConst(rows + 1) + rr;
  }
}

int64_t operandSliceBytes(const TiledContraction& s, int64_t stages, int64_t tileK) {
  auto bytes = [&](const TiledContraction::Operand& o, int64_t rows) {
    return sliceElements(o, rows, tileK) * dtypeBytes(sliceType(s, o));
  };
  return stages * (bytes(s.a, s.tileM) + bytes(s.b, s.tileN));
}

std::vector<size_t> aSources(const Contraction& c) {
  // Stages name their reduction variables apart (r0, r1): compare with each stage's k as one shared variable.
  constexpr int kCommonK = 1 << 24;
  std::vector<std::string> keys;
  for (const Contraction::Stage& st : c.stages)
    keys.push_back(loop::exprKey(loop::mapIndices(st.a, [&](const Idx& i) {
      return substitute(i, [&](int v, const std::string&) -> Idx { return v == st.kVar ? idxVar(kCommonK, "k") : nullptr; });
    })));
  std::vector<size_t> src;
  for (size_t st = 0; st < c.stages.size(); ++st) {
    src.push_back(st);
    for (size_t first = 0; first < st; ++first)
      if (keys[first] == keys[st]) {
        src.back() = first;
        break;
      }
  }
  return src;
}

int64_t ringSlotBytes(const TiledContraction& s, const Contraction& c) {
  const std::vector<size_t> src = aSources(c);
  int64_t distinctA = 0;
  for (size_t st = 0; st < src.size(); ++st) distinctA += src[st] == st;
  auto bytes = [&](const TiledContraction::Operand& o, int64_t rows) {
    return sliceElements(o, rows, s.tileK) * dtypeBytes(sliceType(s, o));
  };
  return distinctA * bytes(s.a, s.tileM) + static_cast<int64_t>(c.stages.size()) * bytes(s.b, s.tileN);
}

int64_t ringSlotBudget(const TiledContraction& s, const Contraction& c) {
  return ringSlotBytes(s, c) + (s.instruction == TiledContraction::Instruction::Wgmma ? kMbarrierBytes : 0);
}

bool oneBlockPerSm(const Target& target, const TiledContraction& s, const Contraction& c) {
  if (s.instruction != TiledContraction::Instruction::Wgmma) return false;
  const int64_t stages = static_cast<int64_t>(c.stages.size());
  const int64_t registers = ceilDiv(accumulatorRegisters(s, stages) + kRegistersBesideAccumulators, 8) * 8;  // 8 at a time
  return 2 * threadsPerBlock(s) * registers > target.registersPerSm;
}

bool computeBound(const Target& target, const TiledContraction& s, const Contraction& c) {
  const double stages = static_cast<double>(c.stages.size()), outer = static_cast<double>(c.outerPoints);
  const double m = static_cast<double>(c.m), n = static_cast<double>(c.n), k = static_cast<double>(c.k);
  const double flops = 2.0 * outer * stages * m * n * k;
  const double bytes = outer * (m * k + stages * n * k + m * n) * static_cast<double>(dtypeBytes(s.mmaType));
  return flops / target.tensorCoreFlopsPerSecond > bytes / (target.memoryBandwidthGBs * 1e9);
}

namespace {
// Shared memory per block when two share an SM.
int64_t sharedForTwoBlocks(const Target& target) { return target.sharedPerSm / 2 - Target::kReservedSharedPerBlock; }
}  // namespace

bool aloneOnSm(const Target& target, const TiledContraction& s, const loop::Kernel& k) {
  return gridBlocks(s, k) <= target.smCount || oneBlockPerSm(target, s, contractionOf(s, k)) ||
         sharedBytes(s, k) > sharedForTwoBlocks(target);
}

int64_t deepestRing(const Target& target, const TiledContraction& s, const Contraction& c) {
  const int64_t slot = ringSlotBudget(s, c), most = std::min(kMaxRingDepth, std::max<int64_t>(2, ceilDiv(c.k, s.tileK) + 1));
  int64_t depth = 0;
  while (depth < most && (depth + 1) * slot <= target.maxSharedPerBlock) ++depth;
  return depth < 2 ? 0 : depth;
}

int64_t ringDepth(const Target& target, const TiledContraction& s, const Contraction& c) {
  if (oneBlockPerSm(target, s, c)) return deepestRing(target, s, c);  // the SM's shared memory is the block's alone
  const int64_t slot = ringSlotBudget(s, c);
  const int64_t slices = ceilDiv(c.k, s.tileK);
  const int64_t budget = std::min(target.maxSharedPerBlock, sharedForTwoBlocks(target));
  for (int64_t d : {4, 3, 2})
    if (d * slot <= budget) return std::min(d, std::max<int64_t>(2, slices + 1));
  return 0;
}

int64_t copiesAhead(const TiledContraction& s) {
  return s.pipelineDepth - 1 - (s.producerWarp ? 0 : s.mmaInFlight);
}

int64_t accumulatorRegisters(const TiledContraction& s, int64_t stages) {
  const int64_t holders = threadsPerBlock(s) - (s.producerWarp ? Target::kWarpSize : 0);  // the producer warp holds none
  return stages * s.tileM * s.tileN / holders;
}

int64_t prefetchRegisters(const TiledContraction& s, int64_t stages) {
  const int64_t threads = threadsPerBlock(s);
  int64_t regs = 0;
  if (s.a.copy == TiledContraction::Copy::RegisterPrefetch) regs += ceilDiv(s.tileM * s.tileK, threads);
  if (s.b.copy == TiledContraction::Copy::RegisterPrefetch) regs += ceilDiv(s.tileN * s.tileK, threads);
  return stages * regs;
}

std::optional<DType> scheduledTensorCoreType(const Schedule& s) {
  auto* t = std::get_if<TiledContraction>(&s);
  if (!t || t->instruction == TiledContraction::Instruction::Ffma) return std::nullopt;
  return t->mmaType;
}

bool addsPartialsOf(const Program& p, size_t i) {
  if (i + 1 >= p.loop.kernels.size()) return false;
  const auto* t = std::get_if<TiledContraction>(&p.schedules[i]);
  const loop::Kernel &k = p.loop.kernels[i], &sum = p.loop.kernels[i + 1];
  if (!t || k.stages.size() != 1 || k.parallel.size() < 3 || t->mAxis == 0 || t->nAxis == 0 || k.parallel[0].extent < 2)
    return false;
  if (!std::holds_alternative<PointwiseMap>(p.schedules[i + 1]) || !sum.stages.empty() || sum.parallel.size() + 1 != k.parallel.size())
    return false;
  for (size_t d = 0; d < sum.parallel.size(); ++d)
    if (sum.parallel[d].var != k.parallel[d + 1].var || sum.parallel[d].extent != k.parallel[d + 1].extent) return false;
  const loop::Buffer& partials = p.loop.buffers[static_cast<size_t>(k.output)];
  if (partials.kind != loop::Buffer::Kind::Temp || partials.dtype != DType::F32 || partials.shape.empty() ||
      partials.shape[0] != k.parallel[0].extent)
    return false;
  bool readsPartials = false, othersRead = false;
  for (size_t j = 0; j < p.loop.kernels.size(); ++j)
    loop::forEachKernelExpr(p.loop.kernels[j], [&](const loop::ExprP& e) {
      loop::forEachLoad(e, [&](const loop::Expr& load) {
        if (load.buffer != k.output) return;
        (j == i + 1 ? readsPartials : othersRead) = true;
      });
    });
  return readsPartials && !othersRead;
}

SplitParts splitParts(const TiledContraction& s, const loop::Kernel& k) {
  const int64_t parts = k.parallel.at(0).extent;
  return {parts, gridBlocks(Schedule{s}, k) / parts};
}

StreamK streamK(const TiledContraction& s, const Contraction& c) {
  StreamK w;
  w.units = tilesM(s, c) * tilesN(s, c) / s.cluster;
  w.slices = ceilDiv(c.k, s.tileK);
  w.steps = w.units * w.slices;
  w.clusters = s.streamBlocks / s.cluster;
  w.longest = ceilDiv(w.steps, w.clusters);
  // The shortest walk is floor(steps / clusters) >= 1 steps: a tile's slices span at most ceil((slices - 1) / shortest) + 1 walks.
  const int64_t shortest = std::max<int64_t>(1, w.steps / w.clusters);
  w.pieces = std::min(w.clusters, ceilDiv(w.slices - 1, shortest) + 1);
  return w;
}

}  // namespace kiln::tile
