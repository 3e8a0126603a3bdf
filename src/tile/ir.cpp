#include "kiln/tile/ir.h"
#include "kiln/loop/attention.h"

#include <fmt/format.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "kiln/support/error.h"
#include "kiln/tile/layout.h"
#include "kiln/tile/parser.h"

namespace kiln::tile {
namespace {

using TC = TiledContraction;

const char* combineName(RowReduction::Combine c) {
  return c == RowReduction::Combine::SharedTree ? "shared_tree" : "warp_shuffle";
}
const char* instructionName(TC::Instruction i) {
  return i == TC::Instruction::Ffma ? "ffma" : i == TC::Instruction::MmaSync ? "mma.sync.m16n8k16" : "wgmma.m64nNk16";
}
const char* layoutName(TC::SharedLayout l) {
  switch (l) {
    case TC::SharedLayout::KMajorF32: return "k_major_f32";
    case TC::SharedLayout::RowPairs: return "row_pairs";
    case TC::SharedLayout::CoreMatrices: return "core_matrices";
    case TC::SharedLayout::Swizzled128: return "swizzled_128b";
    case TC::SharedLayout::RowsF32: return "rows_f32";
  }
  return "?";
}
const char* copyName(TC::Copy c) {
  return c == TC::Copy::Plain ? "plain" : c == TC::Copy::RegisterPrefetch ? "register_prefetch" : c == TC::Copy::Tma ? "tma" : "cp_async";
}
const char* fragmentsName(TC::Fragments f) {
  return f == TC::Fragments::Elements ? "elements" : f == TC::Fragments::Pairs ? "pairs" : "ldmatrix";
}

std::string operandString(const TC& s, const TC::Operand& o, int64_t rows) {
  std::string shape = o.layout == TC::SharedLayout::RowPairs
                          ? fmt::format("[{}][{}+{}]:{}", rows, s.tileK, kPairPad, dtypeName(sliceType(s, o)))
                      : o.layout == TC::SharedLayout::RowsF32 ? fmt::format("[{}][{}+{}]:f32", rows, s.tileK, kF32RowPad)
                      : o.layout == TC::SharedLayout::CoreMatrices
                          ? fmt::format("[{}/8][{}/8][8][8]:{}", rows, s.tileK, dtypeName(sliceType(s, o)))
                      : o.layout == TC::SharedLayout::Swizzled128
                          ? fmt::format("[{}][{}]:{}", rows, s.tileK, dtypeName(sliceType(s, o)))
                          : fmt::format("[{}][{}+1]:f32", s.tileK, rows);
  return fmt::format("{} {} {}{}", copyName(o.copy), layoutName(o.layout), shape,
                     s.pipelineDepth > 1 ? fmt::format(" x{} ring", s.pipelineDepth) : "");
}

std::string keyBoundsString(const FlashAttention& f) {
  std::string s;
  if (f.keyFrom) s += fmt::format(", from query + {}", *f.keyFrom);
  if (f.keyTo) s += fmt::format(", before query + {}", *f.keyTo);
  return s;
}

}  // namespace

const char* strategyName(const Schedule& s) {
  if (std::holds_alternative<PointwiseMap>(s)) return "pointwise_map";
  if (std::holds_alternative<RowReduction>(s)) return "row_reduction";
  if (std::holds_alternative<FlashAttention>(s)) return "flash_attention";
  return "tiled_contraction";
}

std::string describe(const Schedule& s, const loop::Kernel& k) {
  std::string launch = fmt::format("grid {} x {} threads", gridBlocks(s, k), threadsPerBlock(s));
  if (int64_t shared = sharedBytes(s, k); shared > 0)
    launch += fmt::format(", {} B {}shared", shared, dynamicShared(s) ? "dynamic " : "");
  if (auto* m = std::get_if<PointwiseMap>(&s))
    return fmt::format("pointwise_map vector {}, {} vectors per thread  ({})", m->vector, m->vectorsPerThread, launch);
  if (auto* r = std::get_if<RowReduction>(&s))
    return fmt::format("row_reduction {} rows of {}: {} threads per row, {} rows per block, vector {}, combine {}{}{}{}  ({})",
                       rowsOf(k), rowWidth(k), r->threadsPerRow, r->rowsPerBlock, r->vector, combineName(r->combine),
                       r->rowInRegisters ? ", row in registers" : "",
                       r->reductionVector > 1 ? fmt::format(", reductions by vectors of {}", r->reductionVector) : "",
                       r->stagesTogether ? ", stages walked together" : "", launch);
  if (auto* f = std::get_if<FlashAttention>(&s))
    return fmt::format("flash_attention query {} ({} blocks of {}), keys {} in steps of {}{}, depth {}, width {}; {}; q, k, v "
                       "by cp_async into [rows][width+{}] slices, k and v x{} ring  ({})",
                       k.parallel[static_cast<size_t>(f->queryAxis)].name, flashQueryBlocks(*f, k), f->blockQ,
                       k.attention->key.extent, f->blockKV, keyBoundsString(*f), k.attention->dot.axes[0].extent,
                       k.parallel[static_cast<size_t>(k.rowAxes)].extent,
                       flashOnCudaCores(*f) ? "ffma, 16 lanes per 2 rows, probabilities through shared [rows][keys+4]:f32"
                                            : fmt::format("mma.sync.{} warps {} of {} rows{}", dtypeName(f->mmaType), f->blockQ / f->warpRows, f->warpRows,
                                                          f->keySplit > 1 ? fmt::format(" x {} splitting each step's keys", f->keySplit) : ""),
                       16 / dtypeBytes(f->mmaType), f->ring, launch) +
           (f->pairBlocks ? "; query blocks paired last with first" : "") +
           (f->rowsInner ? "; grid: rows inner, heaviest query blocks first, then lightest" : "") +
           (f->packedPairs > 0 ? fmt::format("; grid: {} thread blocks of two query blocks whose key steps add up evenly "
                                             "(the heaviest alone)", f->packedPairs)
                               : "") +
           (f->rowSumsByMma ? "; row sums by mma" : "") + (f->scoresByWgmma ? "; scores by wgmma (q, k in swizzled rows)" : "") +
           (f->valuesByWgmma ? "; p · v by wgmma (p from registers, v in swizzled rows)" : "") +
           (f->scoresAhead ? "; scores a step ahead" : "") +
           (f->blockRows > 0 ? fmt::format("; a block per {} query heads sharing k and v", f->blockRows) : "") +
           (f->keyBlocks > 1 ? fmt::format("; keys split over {} blocks per query block, the last to finish merging their partials",
                                           f->keyBlocks)
                             : "");
  const auto& t = std::get<TiledContraction>(s);
  Contraction c = contractionOf(t, k);
  std::string instr;
  switch (t.instruction) {
    case TC::Instruction::Ffma: instr = fmt::format("ffma micro {}x{}", t.microM, t.microN); break;
    case TC::Instruction::MmaSync:
      instr = fmt::format("{}.{} warps 2x2 of {}x{}, fragments {}", instructionName(t.instruction), dtypeName(t.mmaType),
                          t.tileM / 2, t.tileN / 2, fragmentsName(t.fragments));
      break;
    case TC::Instruction::Wgmma:
      instr = fmt::format("wgmma.m64n{}k16.{} warpgroups {} of 64x{}{}", t.tileN, dtypeName(t.mmaType), t.tileM / 64, t.tileN,
                          t.mmaInFlight > 0 ? fmt::format(", {} group in flight (copies {} slice{} ahead)", t.mmaInFlight,
                                                          copiesAhead(t), copiesAhead(t) == 1 ? "" : "s")
                                            : "");
      if (t.stackedB) instr += fmt::format(", the {} stages' B stacked: wgmma.m64n{}k16", k.stages.size(),
                                           static_cast<int64_t>(k.stages.size()) * t.tileN);
      if (t.cluster > 1) instr += fmt::format(", clusters of {} blocks ({} multicast)", t.cluster, t.multicastB ? "B" : "A");
      if (t.producerWarp) instr += ", a producer warp issuing the copies";
      if (t.unrollRing) instr += fmt::format(", the k loop unrolled by the ring ({} steps a round)", t.pipelineDepth);
      break;
  }
  if (t.streamK && t.streamBlocks == 0)
    instr += ", stream-K chosen but not walked (tile-stream-k-products needs a producer warp, one stage or stacked B, no other "
             "output axes, blocks alone on their SMs and tiles that are not whole waves)";
  if (t.streamBlocks > 0) {
    const StreamK w = streamK(t, c);
    instr += fmt::format(", stream-K: a persistent grid of {} clusters walking {} steps ({} units x {} slices), {} or {} a cluster; "
                         "the block of a tile's first slice adds the partials of its other {} blocks at most",
                         w.clusters, w.steps, w.units, w.slices, w.steps / w.clusters, w.longest, w.pieces - 1);
  }
  return fmt::format("tiled_contraction m={} n={} k={} tile {}x{}x{} ({} x {} tiles, n fastest) {}; A: {}; B: {}  ({}){}",
                     k.parallel[static_cast<size_t>(t.mAxis)].name, k.parallel[static_cast<size_t>(t.nAxis)].name, c.k,
                     t.tileM, t.tileN, t.tileK, tilesM(t, c), tilesN(t, c), instr, operandString(t, t.a, t.tileM),
                     operandString(t, t.b, t.tileN), launch, t.model.empty() ? "" : "  [" + t.model + "]");
}

std::string print(const Program& p) {
  std::string out = fmt::format("// kiln tile IR: {} (target {}, {} SMs)\ntarget {}", p.loop.modelName, p.target.arch,
                                p.target.smCount, p.target.arch);
  if (p.target.smCount != targetFor(p.target.arch).smCount) out += fmt::format(" sms {}", p.target.smCount);
  out += "\n" + loop::printBuffers(p.loop);
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    const loop::Kernel& k = p.loop.kernels[i];
    out += fmt::format("\nkernel {} writes {}  // {}\n  schedule {}\n  // {}\n", k.name, p.loop.buffers[k.output].name,
                       fmt::join(k.origins, "; "), scheduleFields(p.schedules[i]), describe(p.schedules[i], k));
    out += loop::printKernelBody(p.loop, k);
  }
  return out + "\n" + loop::printReturn(p.loop);
}

std::string explainSchedules(const Program& p) {
  std::string out = fmt::format("// kiln schedules: {} (target {}, {} SMs)\n", p.loop.modelName, p.target.arch, p.target.smCount);
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    const loop::Kernel& k = p.loop.kernels[i];
    out += fmt::format("{}  // {}\n  {}\n", k.name, fmt::join(k.origins, "; "), describe(p.schedules[i], k));
  }
  return out;
}

nlohmann::json toJson(const Program& p) {
  nlohmann::json j = loop::toJson(p.loop);
  j["level"] = "tile";
  j["target"] = p.target.arch;
  for (size_t i = 0; i < p.schedules.size(); ++i) j["kernels"][i]["schedule"] = toJson(p.schedules[i]);
  return j;
}

namespace {

bool powerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// A vector is as many points as one 16-byte store of the output holds (loads of wider types are split).
void verifyVector(const loop::Program& p, const loop::Kernel& k, int64_t vector, int64_t innermost) {
  const int64_t bytes = dtypeBytes(p.buffers[static_cast<size_t>(k.output)].dtype);
  KILN_ASSERT(powerOfTwo(vector) && vector * bytes <= Target::kVectorBytes,
              "kernel {}: vector {} is not a power of two of at most 16 bytes of output", k.name, vector);
  KILN_ASSERT(innermost % vector == 0, "kernel {}: vector {} does not divide the innermost extent {}", k.name, vector, innermost);
}

// Limits of every schedule: an attention kernel is scheduled as flash_attention, and threads and shared memory fit
// the Target's block.
void verifyBlockLimits(const Program& p, const Schedule& s, const loop::Kernel& k) {
  const Target& target = p.target;
  KILN_ASSERT(!k.attention || std::holds_alternative<FlashAttention>(s), "kernel {}: an attention kernel scheduled as {}", k.name,
              strategyName(s));
  const int64_t threads = threadsPerBlock(s);
  KILN_ASSERT(threads >= 1 && threads <= target.maxThreadsPerBlock, "kernel {}: {} threads per block on {}", k.name, threads,
              target.arch);
  const int64_t sharedLimit = dynamicShared(s) ? target.maxSharedPerBlock : target.staticSharedPerBlock;
  KILN_ASSERT(sharedBytes(s, k) <= sharedLimit, "kernel {}: {} B of {} shared memory exceed {}'s {} B", k.name,
              sharedBytes(s, k), dynamicShared(s) ? "dynamic" : "static", target.arch, sharedLimit);
}

void verifyPointwiseMap(const Program& p, const PointwiseMap& m, const loop::Kernel& k) {
  KILN_ASSERT(m.threads % Target::kWarpSize == 0, "kernel {}: {} threads is not whole warps", k.name, m.threads);
  verifyVector(p.loop, k, m.vector, k.parallel.empty() ? 1 : k.parallel.back().extent);
  KILN_ASSERT(m.vectorsPerThread >= 1 && (m.vectorsPerThread == 1 || k.stages.empty()),
              "kernel {}: several vectors per thread only without reductions", k.name);
}

void verifyRowReduction(const Program& p, const RowReduction& r, int64_t threads, const loop::Kernel& k) {
  KILN_ASSERT(!k.stages.empty(), "kernel {}: row_reduction needs a reduction", k.name);
  KILN_ASSERT(powerOfTwo(r.threadsPerRow), "kernel {}: {} threads per row is not a power of two", k.name, r.threadsPerRow);
  KILN_ASSERT(r.threadsPerRow >= Target::kWarpSize || r.combine == RowReduction::Combine::WarpShuffle,
              "kernel {}: rows narrower than a warp combine by shuffles", k.name);
  KILN_ASSERT(threads % Target::kWarpSize == 0, "kernel {}: {} threads per block is not whole warps", k.name, threads);
  KILN_ASSERT(rowsOf(k) % r.rowsPerBlock == 0, "kernel {}: {} rows per block do not divide {} rows", k.name,
              r.rowsPerBlock, rowsOf(k));
  KILN_ASSERT(r.rowsPerBlock >= 1 && (r.rowsPerBlock == 1 || r.combine == RowReduction::Combine::WarpShuffle),
              "kernel {}: several rows per block need warp-shuffle combines", k.name);
  const int64_t width = rowWidth(k);
  if (r.vector > 1 || r.rowInRegisters) {
    // Vector and register-resident rows walk each stage's reduction and the row's write with one flat index.
    KILN_ASSERT(static_cast<size_t>(k.rowAxes) + 1 == k.parallel.size(),
                "kernel {}: vector or register rows need one axis per row", k.name);
    for (auto& st : k.stages)
      KILN_ASSERT(st.axes.size() == 1 && st.axes[0].extent == width, "kernel {}: a stage does not span the row", k.name);
    verifyVector(p.loop, k, r.vector, width);
  }
  KILN_ASSERT(powerOfTwo(r.reductionVector) && r.reductionVector <= Target::kVectorBytes / 2,
              "kernel {}: reduction vector {} is not a power of two of at most {} elements", k.name, r.reductionVector,
              Target::kVectorBytes / 2);
  if (r.reductionVector > 1) {
    KILN_ASSERT(r.vector == 1 && !r.rowInRegisters, "kernel {}: reduction vectors only in rows read one element at a time", k.name);
    for (auto& st : k.stages)
      KILN_ASSERT(st.axes.size() == 1 && st.axes[0].extent % r.reductionVector == 0,
                  "kernel {}: reduction vector {} needs every stage to reduce one axis it divides", k.name, r.reductionVector);
  }
  if (r.stagesTogether) {
    KILN_ASSERT(r.reductionVector > 1, "kernel {}: stages walked together only in reductions by vectors", k.name);
    KILN_ASSERT(stagesIndependent(k), "kernel {}: stages walked together need one axis of one extent and none reading another's total",
                k.name);
  }
}

// The instructions flash_attention uses exist on the Target and fit the kernel's operands.
void verifyFlashInstructions(const Target& target, const FlashAttention& f, const loop::AttentionOperands& o,
                             const loop::Kernel& k) {
  const bool cudaCores = flashOnCudaCores(f);
  KILN_ASSERT(target.cpAsync && (cudaCores || target.ldmatrix), "kernel {}: flash_attention needs cp.async{}, which {} lacks",
              k.name, cudaCores ? "" : " and ldmatrix", target.arch);
  KILN_ASSERT(!cudaCores || f.keySplit == 1, "kernel {}: f32 flash_attention splits no keys (key split {})", k.name, f.keySplit);
  KILN_ASSERT(!cudaCores || !f.rowSumsByMma, "kernel {}: f32 flash_attention sums its rows without mma", k.name);
  const bool byWgmma = target.wgmma && flashOneWarpgroup(f);
  KILN_ASSERT(!f.scoresByWgmma || (byWgmma && o.depth % 64 == 0),
              "kernel {}: flash_attention scores by wgmma need sm_90a, tensor cores, one warpgroup of 16-row warps (block_q "
              "{}, no key split) and a depth that is a multiple of 64", k.name, kFlashWgmmaRows);
  KILN_ASSERT(!f.valuesByWgmma || (byWgmma && o.width % 64 == 0 && o.width <= 256),
              "kernel {}: flash_attention p · v by wgmma needs sm_90a, tensor cores, one warpgroup of 16-row warps (block_q "
              "{}, no key split) and output rows of 64 to 256 values, a multiple of 64 (not {})", k.name, kFlashWgmmaRows, o.width);
  KILN_ASSERT((f.queryAxis == o.queryAxis || f.blockRows > 0) && f.mmaType == o.type,
              "kernel {}: flash_attention's query axis or type is not the kernel's", k.name);
}

// Block, warp, key-split and ring sizes the flash lowering implements.
void verifyFlashShape(const FlashAttention& f, const loop::Kernel& k) {
  const bool cudaCores = flashOnCudaCores(f);
  KILN_ASSERT((f.blockQ == 16 || f.blockQ == 32 || f.blockQ == 64 || f.blockQ == 128) &&
                  (f.blockKV == 64 || (cudaCores ? f.blockKV == 32 : f.blockKV == 128)),
              "kernel {}: flash_attention blocks are 16, 32, 64 or 128 queries by 64 keys (f32 also 32, tensor cores also 128), "
              "not {} by {}", k.name,
              f.blockQ, f.blockKV);
  KILN_ASSERT((f.warpRows == 16 || (f.warpRows == 32 && !cudaCores && f.keySplit == 1)) && f.blockQ % f.warpRows == 0 &&
                  f.blockQ / f.warpRows <= 4,
              "kernel {}: flash_attention warps of {} rows in blocks of {} (16, or 32 on tensor cores without a key split; "
              "at most 4 warps of rows)", k.name, f.warpRows, f.blockQ);
  KILN_ASSERT(f.keySplit == 1 || f.keySplit == 2 || f.keySplit == 4, "kernel {}: flash_attention key split {} (1, 2 or 4)",
              k.name, f.keySplit);
  KILN_ASSERT(f.ring >= 2 && f.ring <= 4, "kernel {}: flash_attention ring of {} slots (2 to 4)", k.name, f.ring);
  KILN_ASSERT(f.keyBlocks >= 1, "kernel {}: flash_attention keys split over {} blocks", k.name, f.keyBlocks);
  KILN_ASSERT(!f.scoresAhead || (!cudaCores && f.keySplit == 1 && f.ring == 2),
              "kernel {}: flash_attention scores a step ahead need tensor cores, no key split and two ring slots", k.name);
  if (f.packedPairs > 0) {
    const int64_t items = flashQueryBlocksInAll(f, k);
    KILN_ASSERT(!cudaCores && f.keyTo && !f.pairBlocks && !f.rowsInner && f.packedPairs < items && items <= 2 * f.packedPairs,
                "kernel {}: flash_attention packed in {} thread blocks of two needs tensor cores, a causal mask, no other grid "
                "order and between {} and {} query blocks (it has {})", k.name, f.packedPairs, f.packedPairs + 1,
                2 * f.packedPairs, items);
  }
}

// Buffer b of the program is of `kind` and `dtype` with `elements` or more (the scratch a schedule's blocks meet at:
// programBuffer's).
bool scratchBuffer(const Program& p, int b, loop::Buffer::Kind kind, DType dtype, int64_t elements) {
  if (b < 0 || b >= static_cast<int>(p.loop.buffers.size())) return false;
  const loop::Buffer& buf = p.loop.buffers[static_cast<size_t>(b)];
  return buf.kind == kind && buf.dtype == dtype && numel(buf.shape) >= elements;
}

// Flash-decoding (FlashAttention::keyBlocks): a grid of unpaired, unpacked blocks, and the buffers its blocks meet at.
void verifyFlashKeyBlocks(const Program& p, const FlashAttention& f, const loop::Kernel& k) {
  KILN_ASSERT(f.keyBlocks <= kFlashMaxKeyBlocks && !f.pairBlocks && f.packedPairs == 0,
              "kernel {}: flash_attention keys split over {} blocks (at most {}, no paired or packed query blocks)", k.name,
              f.keyBlocks, kFlashMaxKeyBlocks);
  const int64_t items = flashQueryBlocksInAll(f, k), elements = flashPartialsElements(f, k);
  KILN_ASSERT(scratchBuffer(p, f.counters, loop::Buffer::Kind::Counters, DType::I64, items),
              "kernel {}: flash_attention split over blocks needs an i64 counters buffer of {} counters or more (buffer #{})",
              k.name, items, f.counters);
  KILN_ASSERT(scratchBuffer(p, f.partials, loop::Buffer::Kind::Temp, DType::F32, elements),
              "kernel {}: flash_attention split over blocks needs an f32 buffer of {} partial values or more (buffer #{})",
              k.name, elements, f.partials);
}

// A block of fewer rows than its tiles (FlashAttention::blockRows): query heads sharing k and v, nothing else changed.
void verifyFlashBlockRows(const Program& p, const FlashAttention& f, const loop::Kernel& k) {
  const int64_t extent = k.parallel[static_cast<size_t>(f.queryAxis)].extent;
  KILN_ASSERT(f.blockRows <= f.blockQ && extent % f.blockRows == 0 && !f.keyFrom && !f.keyTo && !f.pairBlocks &&
                  f.packedPairs == 0 && !f.scoresByWgmma && !f.valuesByWgmma,
              "kernel {}: flash_attention blocks of {} rows along an axis of {} (at most block_q {} and dividing it; no key "
              "bounds, pairing, packing or wgmma)", k.name, f.blockRows, extent, f.blockQ);
  KILN_ASSERT(loop::sharedAcrossRows(p.loop, k, f.queryAxis, f.blockRows),
              "kernel {}: flash_attention blocks of {} rows of axis {} whose k and v differ between the rows", k.name,
              f.blockRows, k.parallel[static_cast<size_t>(f.queryAxis)].name);
}

void verifyFlashAttention(const Program& p, const FlashAttention& f, const loop::Kernel& k) {
  const Target& target = p.target;
  auto o = loop::flashAttentionOperands(p.loop, k);
  KILN_ASSERT(o, "kernel {}: flash_attention needs an attention kernel of contiguous q, k, v (loop::flashAttentionOperands)",
              k.name);
  verifyFlashInstructions(target, f, *o, k);
  verifyFlashShape(f, k);
  const int64_t registers = flashAccumulators(f, o->depth, o->width);
  KILN_ASSERT(registers < target.maxRegistersPerThread, "kernel {}: {} accumulator registers per thread", k.name, registers);
  if (f.keyBlocks > 1) verifyFlashKeyBlocks(p, f, k);
  if (f.blockRows > 0) verifyFlashBlockRows(p, f, k);
}

void verifyMmaSyncTiles(const TC& t, const loop::Kernel& k) {
  auto side = [](int64_t v) { return v == 32 || v == 64 || v == 128; };
  KILN_ASSERT(side(t.tileM) && side(t.tileN) && t.tileK > 0 && t.tileK % 16 == 0,
              "kernel {}: tensor-core tiles are 32, 64 or 128 on each side with tile_k a multiple of 16, not {}x{}x{}",
              k.name, t.tileM, t.tileN, t.tileK);
  KILN_ASSERT(t.mmaType == DType::BF16 || t.mmaType == DType::F16, "kernel {}: mma on {}", k.name, dtypeName(t.mmaType));
  const bool pairs = t.a.layout == TC::SharedLayout::RowPairs;
  KILN_ASSERT(pairs ? t.fragments != TC::Fragments::Elements : t.fragments == TC::Fragments::Elements,
              "kernel {}: fragments {} from {} slices", k.name, fragmentsName(t.fragments), layoutName(t.a.layout));
}

void verifyWgmmaTiles(const Target& target, const TC& t, const loop::Kernel& k) {
  KILN_ASSERT(target.wgmma, "kernel {}: wgmma on {}, which lacks it (sm_90a only)", k.name, target.arch);
  KILN_ASSERT((t.tileM == 64 || t.tileM == 128 || t.tileM == 256) && t.tileN >= 8 && t.tileN <= 256 && t.tileN % 8 == 0 && t.tileK >= 16 &&
                  t.tileK % 16 == 0,
              "kernel {}: wgmma tiles are 64, 128 or 256 rows by a multiple of 8 up to 256 columns, tile_k a multiple of 16, not "
              "{}x{}x{}", k.name, t.tileM, t.tileN, t.tileK);
  KILN_ASSERT(t.mmaType == DType::BF16 || t.mmaType == DType::F16, "kernel {}: wgmma on {}", k.name, dtypeName(t.mmaType));
  KILN_ASSERT((t.a.layout == TC::SharedLayout::CoreMatrices || (t.a.layout == TC::SharedLayout::Swizzled128 && t.tileK == 64)) &&
                  (t.a.copy == TC::Copy::CpAsync || (t.a.copy == TC::Copy::Tma && t.a.layout == TC::SharedLayout::Swizzled128)),
              "kernel {}: wgmma reads core_matrices (or, 64 deep, swizzled_128b) slices streamed by cp_async (swizzled_128b also by "
              "tma), not {} {} {} deep", k.name, copyName(t.a.copy), layoutName(t.a.layout), t.tileK);
}

void verifyFfmaTiles(const Target& target, const TC& t, int64_t threads, const loop::Kernel& k) {
  KILN_ASSERT(t.tileM > 0 && t.tileN > 0 && t.tileK > 0 && t.microM > 0 && t.microN > 0 && t.tileM % t.microM == 0 &&
                  t.tileN % t.microN == 0,
              "kernel {}: tiles {}x{}x{} with micro tile {}x{} do not divide", k.name, t.tileM, t.tileN, t.tileK, t.microM,
              t.microN);
  KILN_ASSERT(threads >= Target::kWarpSize, "kernel {}: tiled_contraction with {} threads", k.name, threads);
  const bool streamed = t.a.layout == TC::SharedLayout::RowsF32 && t.b.layout == TC::SharedLayout::RowsF32 &&
                        t.a.copy == TC::Copy::CpAsync && t.tileK % 4 == 0 && threads % Target::kWarpSize == 0 &&
                        threads <= target.maxThreadsPerBlock;
  KILN_ASSERT(streamed || (t.a.layout == TC::SharedLayout::KMajorF32 && t.b.layout == TC::SharedLayout::KMajorF32 &&
                           t.a.copy != TC::Copy::CpAsync),
              "kernel {}: CUDA-core products read k-major f32 slices, or rows_f32 slices streamed by cp_async (tile_k a multiple "
              "of 4, whole warps), not {} {}", k.name, copyName(t.a.copy), layoutName(t.a.layout));
}

// Both operands staged alike, by a copy the Target has, through a ring that fits the block's shared memory.
void verifyOperandCopies(const Program& p, const Schedule& s, const TC& t, const loop::Kernel& k) {
  const Target& target = p.target;
  KILN_ASSERT(t.a.layout == t.b.layout && t.a.copy == t.b.copy,
              "kernel {}: the lowering stages both operands alike (layout and copy)", k.name);
  if (t.a.copy == TC::Copy::Tma) {
    KILN_ASSERT(target.tma && t.instruction == TC::Instruction::Wgmma && t.pipelineDepth >= 2 && t.pipelineDepth <= kMaxRingDepth,
                "kernel {}: tma slices feed wgmma on sm_90+ through a ring of 2 to 8 (depth {}, {})", k.name, t.pipelineDepth, target.arch);
    KILN_ASSERT(tmaCopyable(p.loop, k, t), "kernel {}: tma on operands that are not [row][k] views of a buffer", k.name);
    KILN_ASSERT(sharedBytes(s, k) <= target.maxSharedPerBlock, "kernel {}: a ring of {} bytes, more than the {} a block may have",
                k.name, sharedBytes(s, k), target.maxSharedPerBlock);
  } else if (t.a.copy == TC::Copy::CpAsync) {
    const bool ffma = t.instruction == TC::Instruction::Ffma;
    KILN_ASSERT(target.cpAsync && (ffma || target.ldmatrix), "kernel {}: cp.async and ldmatrix on {}, which lacks them", k.name,
                target.arch);
    KILN_ASSERT(((t.instruction == TC::Instruction::MmaSync && t.fragments == TC::Fragments::Ldmatrix) ||
                 t.instruction == TC::Instruction::Wgmma || ffma) &&
                    t.pipelineDepth >= 2 && t.pipelineDepth <= kMaxRingDepth && t.tileK % (ffma ? 4 : 16) == 0,
                "kernel {}: cp_async slices feed ldmatrix fragments of mma.sync, wgmma or ffma through a ring of 2 to 8 (depth {})",
                k.name, t.pipelineDepth);
    KILN_ASSERT(asyncCopyable(p.loop, k, t), "kernel {}: cp_async on operands that are not k-contiguous loads of the multiplied type",
                k.name);
    KILN_ASSERT(sharedBytes(s, k) <= target.maxSharedPerBlock, "kernel {}: a ring of {} bytes, more than the {} a block may have",
                k.name, sharedBytes(s, k), target.maxSharedPerBlock);
  } else {
    KILN_ASSERT(t.mmaInFlight == 0, "kernel {}: wgmma groups in flight without a cp_async ring", k.name);
    KILN_ASSERT(t.pipelineDepth == 1, "kernel {}: a ring of {} slices without cp_async copies", k.name, t.pipelineDepth);
  }
}

// Stacked B slices: one wgmma product over the stages' B tiles side by side, all stages reading one A.
void verifyStackedB(const TC& t, const loop::Kernel& k, int64_t stages) {
  const Contraction c = contractionOf(t, k);
  const std::vector<size_t> src = aSources(c);
  KILN_ASSERT(t.instruction == TC::Instruction::Wgmma && (t.a.copy == TC::Copy::CpAsync || t.a.copy == TC::Copy::Tma) &&
                  std::all_of(src.begin(), src.end(), [](size_t s) { return s == 0; }) && stages * t.tileN <= 256 && t.tileN % 8 == 0,
              "kernel {}: stacked B slices need a cp_async wgmma product whose stages all read one A, with stages x tile_n "
              "a multiple of 8 up to 256 ({} x {})", k.name, stages, t.tileN);
}

// A cluster multicasts one operand's slices over tma to the blocks along the other operand's tiles.
void verifyCluster(const Target& target, const TC& t, const loop::Kernel& k, int64_t stages) {
  const Contraction c = contractionOf(t, k);
  // The operand multicast: its tiles along the cluster's other axis, its slice's rows.
  const int64_t tiles = t.multicastB ? tilesM(t, c) : tilesN(t, c), rows = t.multicastB ? t.tileN : t.tileM;
  KILN_ASSERT(t.a.copy == TC::Copy::Tma && target.tma && (t.cluster == 2 || t.cluster == 4 || t.cluster == 8) &&
                  tiles % t.cluster == 0 && rows % (8 * t.cluster) == 0 && t.producerWarp && copiesAhead(t) >= 2 &&
                  (!t.multicastB || (stages == 1 && !t.stackedB)),
              "kernel {}: clusters of {} blocks need tma copies on sm_90+, 2, 4 or 8 blocks dividing the {} tiles along {}, {} "
              "slices of 8 rows or more per block ({} rows), a producer warp ({}) and copies 2 or more slices ahead (ring {}); "
              "B multicast one stage, unstacked", k.name, t.cluster, tiles, t.multicastB ? "m" : "n", t.multicastB ? "B" : "A",
              rows, t.producerWarp ? "yes" : "none", t.pipelineDepth);
}

// Stream-K: a persistent grid walking the k slices of all tiles, fed by a producer warp.
void verifyStreamK(const TC& t, const loop::Kernel& k, int64_t stages) {
  const Contraction c = contractionOf(t, k);
  KILN_ASSERT(t.producerWarp && !t.unrollRing && c.outerPoints == 1 && t.streamBlocks % t.cluster == 0 &&
                  (stages == 1 || t.stackedB) && tilesM(t, c) * tilesN(t, c) % t.cluster == 0 &&
                  t.streamBlocks / t.cluster <= streamK(t, c).steps,
              "kernel {}: a stream-K grid ({} blocks) needs a tma product with a producer warp and a rolled k loop, one stage or "
              "stacked B, no other output axes, whole clusters, and at least a step per cluster", k.name, t.streamBlocks);
}

void verifyTiledContraction(const Program& p, const Schedule& s, const TC& t, const loop::Kernel& k) {
  const Target& target = p.target;
  const int64_t threads = threadsPerBlock(s);
  contractionOf(t, k);  // asserts that the kernel is a contraction over the schedule's axes
  const int64_t stages = static_cast<int64_t>(k.stages.size());
  if (t.instruction == TC::Instruction::MmaSync) {
    verifyMmaSyncTiles(t, k);
  } else if (t.instruction == TC::Instruction::Wgmma) {
    verifyWgmmaTiles(target, t, k);
  } else {
    verifyFfmaTiles(target, t, threads, k);
  }
  verifyOperandCopies(p, s, t, k);
  KILN_ASSERT(t.mmaInFlight == 0 || (t.instruction == TC::Instruction::Wgmma && t.mmaInFlight == 1 && t.pipelineDepth >= 3),
              "kernel {}: {} wgmma groups in flight need a wgmma product with a ring of 3 or more slices (instruction {}, ring {}) and at "
              "most 1 group", k.name, t.mmaInFlight, instructionName(t.instruction), t.pipelineDepth);
  if (t.stackedB) verifyStackedB(t, k, stages);
  KILN_ASSERT(!t.multicastB || t.cluster > 1, "kernel {}: B multicast without a cluster", k.name);
  if (t.cluster != 1) verifyCluster(target, t, k, stages);
  KILN_ASSERT(!t.producerWarp || (t.a.copy == TC::Copy::Tma && t.mmaInFlight == 1),
              "kernel {}: a producer warp needs a tma product with one wgmma group in flight (copy {}, {} in flight)", k.name,
              copyName(t.a.copy), t.mmaInFlight);
  KILN_ASSERT(!t.unrollRing || t.producerWarp, "kernel {}: a k loop unrolled by the ring needs a producer warp", k.name);
  if (t.streamBlocks > 0) verifyStreamK(t, k, stages);
  const int64_t registers = accumulatorRegisters(t, stages) + prefetchRegisters(t, stages);
  KILN_ASSERT(registers < target.maxRegistersPerThread, "kernel {}: {} accumulator and prefetch registers per thread",
              k.name, registers);
}

void verifySchedule(const Program& p, const Schedule& s, const loop::Kernel& k) {
  verifyBlockLimits(p, s, k);
  if (auto* m = std::get_if<PointwiseMap>(&s)) return verifyPointwiseMap(p, *m, k);
  if (auto* r = std::get_if<RowReduction>(&s)) return verifyRowReduction(p, *r, threadsPerBlock(s), k);
  if (auto* f = std::get_if<FlashAttention>(&s)) return verifyFlashAttention(p, *f, k);
  verifyTiledContraction(p, s, std::get<TiledContraction>(s), k);
}

// A stream-K product's counters (i64, one per output tile) and partial tiles (f32, one per block of the grid).
void verifyStreamKBuffers(const Program& p, const TiledContraction& t, const loop::Kernel& k) {
  const Contraction c = contractionOf(t, k);
  const int64_t tiles = tilesM(t, c) * tilesN(t, c), stages = static_cast<int64_t>(k.stages.size());
  KILN_ASSERT(scratchBuffer(p, t.counters, loop::Buffer::Kind::Counters, DType::I64, tiles),
              "kernel {}: a stream-K product needs an i64 counters buffer of {} counters or more (buffer #{})", k.name, tiles,
              t.counters);
  KILN_ASSERT(scratchBuffer(p, t.partials, loop::Buffer::Kind::Temp, DType::F32, t.streamBlocks * t.tileM * t.tileN * stages),
              "kernel {}: a stream-K product needs an f32 buffer of {} partial tiles of {} x {} x {} (buffer #{})", k.name,
              t.streamBlocks, t.tileM, t.tileN, stages, t.partials);
}

}  // namespace

int programBuffer(Program& p, const std::string& name, loop::Buffer::Kind kind, DType dtype, int64_t elements) {
  for (size_t b = 0; b < p.loop.buffers.size(); ++b) {
    loop::Buffer& buf = p.loop.buffers[b];
    if (buf.name != name) continue;
    buf.shape = {std::max(buf.shape.at(0), elements)};
    return static_cast<int>(b);
  }
  loop::Buffer buf;
  buf.kind = kind;
  buf.name = name;
  buf.dtype = dtype;
  buf.shape = {elements};
  p.loop.buffers.push_back(buf);
  return static_cast<int>(p.loop.buffers.size() - 1);
}

void verify(const Program& p) {
  loop::verify(p.loop);
  KILN_ASSERT(p.schedules.size() == p.loop.kernels.size(), "{} schedules for {} kernels", p.schedules.size(), p.loop.kernels.size());
  for (size_t i = 0; i < p.schedules.size(); ++i) {
    verifySchedule(p, p.schedules[i], p.loop.kernels[i]);
    const auto* t = std::get_if<TiledContraction>(&p.schedules[i]);
    if (t && t->streamBlocks > 0) verifyStreamKBuffers(p, *t, p.loop.kernels[i]);
  }
}

}  // namespace kiln::tile
