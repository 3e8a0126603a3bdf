// tile-shape-products: tensor-core products whose operands stream through cp.async (tile::asyncCopyable) get
// the block tile and the split of the reduction that an analytic model of their memory traffic predicts to be
// fastest on the Target. A product split S ways becomes two kernels: a partial product over K / S of the
// reduction per block, into an f32 buffer [S][output], then a kernel that adds the S partials and applies the
// original epilogue (bias, residual, cast) once.
//
// Why: an LLM's products at 32 to 512 tokens are bound by memory traffic, not by tensor cores. The tile rule of
// tile-tiled-contractions (the largest square tile that still gives a wave of blocks) re-reads the activations
// once per column of tiles and the weights once per row of tiles, and for skinny products (few tiles) it leaves
// SMs idle: TinyLlama's down projection at 128 tokens runs 256 blocks of 32 x 32 that move 184 MB through L2
// for 23 MB of weights; split 2 ways with 64 x 64 tiles, 96 MB.
//
// The model, per candidate (tile_m, tile_n in 32, 64, 128 not much larger than m and n; S in 1, 2, 4, 8):
//   block bytes  = (tile_m * distinct A operands + tile_n * stages) * (K / S) * element bytes
//   traffic      = blocks * block bytes + (S > 1: the partials written and read, 8 bytes per output per split)
//   time         = max(traffic / bandwidth,                       the chip's memory system
//                      waves * block bytes / (2 * bandwidth / SMs), one SM streaming its blocks
//                      padded flops / half the tensor-core peak)    (mma.sync reaches about half of it)
//                  + (S > 1: splitKernelMicros for the second kernel)
// with waves = ceil(blocks / SMs). Candidates need accumulators within 128 registers per thread (2 x 2 warps of
// (tile_m / 2) x (tile_n / 2)); splits only single-stage products, with K / S a multiple of 64 and at least 256.
//
// Products that tile-warpgroup-products made wgmma products (sm_90a) get warpgroup tiles (tile_m 64 or 128, the rows
// past m zero-filled; tile_n a multiple of 8 from 16 to 256, among them widths that spread the columns evenly over the
// SMs), predicted by one of two models that count memory traffic where it happens:
//   HBM bytes    = each operand once (the activations and the weights; the weights again per extra row of tiles when
//                  they do not fit in half the L2) + the partials of a split (8 bytes per output per split)
// Compute-bound products (tile::computeBound: flops at the tensor-core peak outlast the bytes at the bandwidth):
//   time         = max(HBM bytes / bandwidth,
//                      waves * (block bytes / (2 * bandwidth / SMs)   one SM streaming its blocks (through L2),
//                               + slices per block * wgmmaSliceSeconds),   each 64-deep slice's fixed cost
//                      padded flops / (0.7 * the tensor-core peak))   (wgmma from shared memory)
//                  + (S > 1: splitKernelMicros + the adding kernel's bytes (f32 partials read, output written) / bandwidth)
//   (the slice cost came with a sweep of tiles on the H200: narrow tiles walking more slices per SM were slower at
//   equal bytes; measurements: docs/history.md, "Warpgroup products").
// Streaming (memory-bound) products, the LLM's products at 32 and 128 tokens:
//   block        = block bytes / streamingSmBytesPerSecond + slices per block * streamingSliceSeconds
//   time         = sum over the waves of max(block, the wave's blocks' share of HBM bytes / (0.96 * bandwidth)),
//                  at least padded flops / (0.7 * peak)
//                  + (S > 1: streamingSplitMicros + the adding kernel's bytes / streamingPartialsBytesPerSecond)
//   and of the candidates predicted within 5 % of the fastest, the fastest of those in the fewest waves, then splits.
//   Its constants are a least-squares fit (on log time) to 90 measured tiles and splits of nine memory-bound products
//   on the H200 (rms error 7 %): a slice costs about 0.2 us whatever its bytes, and a last wave of a few blocks costs a
//   whole block. The tie rule picks the measured best where the fit cannot tell. What it does not see: two warpgroups
//   (tile_m 128) beat one of twice the width at equal bytes. Choosing with it moved the suite's bf16 products from
//   0.963x to 0.985x eager's geomean. (measurements: docs/history.md, "Warpgroup products")
// The constants named above (splitKernelMicros, ...) and the peak fractions are the Target's ProductCostModel
// (kiln/support/target.h), with the measurements each was fitted to.
// block bytes count A's rows up to m and B's columns up to n (TMA and cp.async zero-fill the rest without reading it).
// Accumulators: stages * tile_n / 2 registers per thread within 128.
// The chosen schedule's `model` field says what was predicted, against the tile it replaced, and the three other
// candidates predicted fastest (a candidate within 5 % of the choice does not replace it, the first found stays, but
// for the streaming rule above; `kiln compile --explain-schedule` lists every kernel's schedule with it).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "kiln/support/error.h"
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {
namespace {

// Which of the header's models predicts a product's time.
enum class Model { MmaSync, WgmmaComputeBound, WgmmaStreaming };

// The predicted time of one candidate.
double predictMicros(const Target& target, const Contraction& c, int64_t aOperands, int64_t tileM, int64_t tileN, int64_t split,
                     int64_t elementBytes, Model model) {
  const ProductCostModel& cost = target.productCosts;
  const double bandwidth = target.memoryBandwidthGBs * 1e9;
  const int64_t stages = static_cast<int64_t>(c.stages.size());
  const int64_t tm = ceilDiv(c.m, tileM), tn = ceilDiv(c.n, tileN);
  const int64_t blocks = c.outerPoints * tm * tn * split;
  const double blockBytes = static_cast<double>((tileM * aOperands + tileN * stages) * (c.k / split) * elementBytes);
  const double slices = static_cast<double>(ceilDiv(c.k / split, 64));
  double memory = static_cast<double>(blocks) * blockBytes;  // mma.sync: every block's operands at HBM bandwidth
  if (model != Model::MmaSync) {  // each operand once; the weights again per row of tiles when they do not stay in L2
    const double weights = static_cast<double>(c.outerPoints * c.n * c.k * stages * elementBytes);
    memory = static_cast<double>(c.outerPoints * c.m * c.k * aOperands * elementBytes) +
             weights * static_cast<double>(weights > target.l2Bytes / 2 ? tm : 1);
  }
  if (split > 1) memory += 8.0 * static_cast<double>(split * c.outerPoints * c.m * c.n);
  const double waves = static_cast<double>(ceilDiv(blocks, target.smCount));
  const double flops = 2.0 * static_cast<double>(c.outerPoints * tm * tileM * tn * tileN * c.k * stages);
  const double peak = (model == Model::MmaSync ? cost.mmaSyncPeakFraction : cost.wgmmaPeakFraction) * target.tensorCoreFlopsPerSecond;
  const double smRate = 2.0 * bandwidth / static_cast<double>(target.smCount);
  // A split's second kernel runs after the first: its launch and (wgmma) reading the f32 partials and writing the output.
  const double partialsBytes = static_cast<double>((4 * split + 2) * c.outerPoints * c.m * c.n);
  switch (model) {
    case Model::MmaSync:
      return (std::max({memory / bandwidth, waves * blockBytes / smRate, flops / peak}) +
              (split > 1 ? cost.splitKernelMicros * 1e-6 : 0.0)) * 1e6;
    case Model::WgmmaComputeBound:  // each slice a block walks also costs wgmmaSliceSeconds on its SM
      return (std::max({memory / bandwidth, waves * (blockBytes / smRate + slices * cost.wgmmaSliceSeconds), flops / peak}) +
              (split > 1 ? cost.splitKernelMicros * 1e-6 + partialsBytes / bandwidth : 0.0)) * 1e6;
    case Model::WgmmaStreaming: {
      // A block streams its operands and pays a fixed cost per slice; a wave of blocks takes the longer of that and its
      // share of the memory traffic (a last wave of a few blocks costs a block's whole time while HBM idles).
      const double block = blockBytes / cost.streamingSmBytesPerSecond + slices * cost.streamingSliceSeconds;
      const double stream = memory / (cost.streamingBandwidthFraction * bandwidth);
      double walked = 0;
      for (int64_t left = blocks; left > 0; left -= target.smCount)
        walked += std::max(block, stream * static_cast<double>(std::min(left, target.smCount)) / static_cast<double>(blocks));
      return (std::max(walked, flops / peak) +
              (split > 1 ? cost.streamingSplitMicros * 1e-6 + partialsBytes / cost.streamingPartialsBytesPerSecond : 0.0)) * 1e6;
    }
  }
  return 0;
}

}  // namespace

void splitProduct(Program& p, size_t i, int64_t split, TiledContraction partialSchedule) {
  const loop::Kernel orig = p.loop.kernels[i];
  const loop::Buffer out = p.loop.buffers[static_cast<size_t>(orig.output)];
  const bool one = orig.stages.size() == 1;
  const int sVar = orig.maxVar() + 1;
  std::vector<int> partialsIds;  // per stage
  std::vector<loop::Kernel> partials;
  for (size_t st = 0; st < orig.stages.size(); ++st) {
    const loop::Reduction& stage = orig.stages[st];
    const loop::Axis r = stage.axes.at(0);
    const int64_t part = r.extent / split;
    const std::string suffix = one ? "_split" : fmt::format("_split{}", st);
    loop::Buffer buffer;
    buffer.kind = loop::Buffer::Kind::Temp;
    buffer.name = out.name + suffix;
    buffer.dtype = DType::F32;
    buffer.shape = out.shape;
    buffer.shape.insert(buffer.shape.begin(), split);
    partialsIds.push_back(static_cast<int>(p.loop.buffers.size()));
    p.loop.buffers.push_back(buffer);

    loop::Kernel partial;
    partial.name = orig.name + suffix;
    partial.output = partialsIds.back();
    partial.parallel.push_back(loop::Axis{sVar, "ps", split});
    partial.parallel.insert(partial.parallel.end(), orig.parallel.begin(), orig.parallel.end());
    partial.rowAxes = orig.rowAxes + 1;
    Idx kFrom = idxMul(idxVar(sVar, "ps"), part) + idxVar(r.var, r.name);
    loop::Reduction ps{stage.fn, {loop::Axis{r.var, r.name, part}},
                       loop::mapIndices(stage.value, [&](const Idx& e) {
                         return substitute(e, [&](int v, const std::string&) -> Idx { return v == r.var ? kFrom : nullptr; });
                       })};
    partial.stages.push_back(ps);
    partial.result = loop::accRef(0);
    partial.origins = orig.origins;
    partials.push_back(partial);
  }

  // The adding kernel: each stage's partials summed, ((p0 + p1) + p2) + ..., the order a reduction over them would add
  // (from 0, which adds nothing), in place of that stage's accumulator; with no reduction left it is a plain pointwise
  // map, which moves 16-byte vectors (tile-vectorize-accesses' rule; that pass ran before this one).
  loop::Kernel sum = orig;
  sum.stages.clear();
  sum.result = loop::mapAccs(orig.result, [&](int st) {
    loop::ExprP total;
    for (int64_t q = 0; q < split; ++q) {
      std::vector<Idx> at{idxConst(q)};
      for (const loop::Axis& a : orig.parallel) at.push_back(idxVar(a.var, a.name));
      loop::ExprP part = loop::load(partialsIds.at(static_cast<size_t>(st)), at);
      total = total ? loop::apply(loop::Fn::Add, {total, part}) : part;
    }
    return total;
  });

  partialSchedule.mAxis += 1;
  partialSchedule.nAxis += 1;
  const auto at = [&](size_t j) { return static_cast<std::ptrdiff_t>(i + j); };
  p.loop.kernels[i] = partials[0];
  p.schedules[i] = partialSchedule;
  for (size_t st = 1; st < partials.size(); ++st) {
    p.loop.kernels.insert(p.loop.kernels.begin() + at(st), partials[st]);
    p.schedules.insert(p.schedules.begin() + at(st), partialSchedule);
  }
  p.loop.kernels.insert(p.loop.kernels.begin() + at(partials.size()), sum);
  PointwiseMap adding;
  vectorizePointwise(p.target, p.loop, p.loop.kernels[i + partials.size()], adding);
  p.schedules.insert(p.schedules.begin() + at(partials.size()), adding);
}

namespace {

// What the candidate searches below share: the product, its model and which splits it may take.
struct Search {
  const Program& p;
  const TiledContraction& s;
  const Contraction& c;
  Model model;
  int64_t stages;
  ProductPrediction& out;

  bool splits(int64_t split) const { return split == 1 || (stages == 1 && c.k % (split * 64) == 0 && c.k / split >= 256); }
  int64_t blocks(int64_t tileM, int64_t tileN, int64_t split) const {
    return c.outerPoints * ceilDiv(c.m, tileM) * ceilDiv(c.n, tileN) * split;
  }
  // A candidate predicted `micros`: considered, and the best if clearly (5 %) faster.
  void consider(int64_t tileM, int64_t tileN, int64_t split, double micros) {
    out.considered.push_back({tileM, tileN, split, micros});
    if (micros < out.best.micros * 0.95) out.best = {tileM, tileN, split, micros};
  }

  std::vector<int64_t> warpgroupWidths() const;
  bool warpgroupTileAllowed(int64_t tileM, int64_t tileN, int64_t split) const;
  void considerWarpgroupTiles();
  void preferFewestWaves();
  void preferStreamK();
  void considerMmaSyncTiles();
};

// Warpgroup tile widths: a multiple of 8 from 16 to 256, among them the widths that give each of 1 to 4 waves of blocks
// an even share of n, and the --product-shapes table's (considered like the others).
std::vector<int64_t> Search::warpgroupWidths() const {
  std::vector<int64_t> widths{16, 32, 64, 96, 128, 192, 256};
  for (int64_t w = 1; w <= 4; ++w)
    for (int64_t split : {1, 2, 4, 8}) {
      const int64_t perRowOfTiles = w * p.target.smCount / (split * c.outerPoints * ceilDiv(c.m, 128));
      if (perRowOfTiles > 0) widths.push_back(ceilDiv(ceilDiv(c.n, perRowOfTiles), 8) * 8);
    }
  if (const TabledShape* t = tabledShape(p, s.mmaType, c)) widths.push_back(t->tileN);
  std::sort(widths.begin(), widths.end());
  widths.erase(std::unique(widths.begin(), widths.end()), widths.end());
  return widths;
}

// 64 or 128 rows (128 only when m needs more than one 64-row tile); four warpgroups (tile_m 256) for compute-bound
// products of more than 128 rows only, their accumulators within the 96 registers ptxas leaves each of 17 warps (with a
// producer warp); accumulators within 128 registers per thread.
bool Search::warpgroupTileAllowed(int64_t tileM, int64_t tileN, int64_t split) const {
  if (tileM == 256 && (c.m <= 128 || model != Model::WgmmaComputeBound || stages * tileN / 2 > 48)) return false;
  if ((tileM == 128 && c.m <= 64) || tileN < 16 || tileN > 256 || tileN > ceilDiv(c.n, 8) * 8 + 8 || !splits(split)) return false;
  return stages * tileN / 2 <= 128;
}

void Search::considerWarpgroupTiles() {
  const std::vector<int64_t> widths = warpgroupWidths();
  out.best.micros = std::numeric_limits<double>::infinity();  // the tile-tiled-contractions tile is no warpgroup tile
  for (int64_t tileM : {64, 128, 256})
    for (int64_t tileN : widths)
      for (int64_t split : {1, 2, 4, 8}) {
        if (!warpgroupTileAllowed(tileM, tileN, split)) continue;
        TiledContraction sized = s;
        sized.tileM = tileM;
        sized.tileN = tileN;
        if (ringDepth(p.target, sized, c) == 0) continue;  // the ring does not fit
        double t = out.predict(tileM, tileN, split);
        // A compute-bound product whose blocks are alone on their SMs (one wave, or registers for one block: the ring is
        // not sized yet) and walk kMinSpecializedSlices or more slices gets a producer warp (tile-specialize-warps),
        // measured 3-6 % faster there; the model's terms do not see it.
        if (model == Model::WgmmaComputeBound && ceilDiv(c.k / split, 64) >= kMinSpecializedSlices &&
            (blocks(tileM, tileN, split) <= p.target.smCount || oneBlockPerSm(p.target, sized, c)))
          t *= p.target.productCosts.specializedFraction;
        consider(tileM, tileN, split, t);
      }
}

// A streaming product takes, of the candidates within 5 % of the fastest prediction, the fastest of those in the
// fewest waves of blocks and then with the fewest splits (the first found of equals). Measured: Qwen2.5-7B gate_proj
// at 32 tokens, 64x144 in one wave 34.8 us, 64x72 in two 46.6; TinyLlama q_proj at 128 tokens, 64x64 split 2
// 7.2 us, 64x128 split 4 7.9 (the partials' round trip costs more than the model counts); both within 5 %.
void Search::preferFewestWaves() {
  const std::vector<ProductCandidate>& considered = out.considered;
  if (model != Model::WgmmaStreaming || considered.empty()) return;
  const auto faster = [](const ProductCandidate& a, const ProductCandidate& b) { return a.micros < b.micros; };
  const double fastest = std::min_element(considered.begin(), considered.end(), faster)->micros;
  auto key = [&](const ProductCandidate& x) {
    return std::make_tuple(ceilDiv(blocks(x.tileM, x.tileN, x.split), p.target.smCount), x.split, x.micros);
  };
  const ProductCandidate* chosen = nullptr;
  for (const ProductCandidate& x : considered)
    if (x.micros <= fastest * 1.05 && (!chosen || key(x) < key(*chosen))) chosen = &x;
  out.best = *chosen;
}

// A compute-bound product of one stage whose 128 x 256 tiles make two waves or more, not a whole number of them, takes
// them: tile-stream-k-products walks such grids as one persistent wave of clusters sharing B (tiles wide, so
// tile-multicast-operands shares B). The model does not see stream-K, so this rule comes from measurements: faster on
// the one such product of the suite (Qwen2.5-7B gate_proj at 512 tokens, 296 such tiles); with fewer tiles than two
// waves each tile is shared by several walks and stream-K measured slower. (measurements: docs/history.md, "Stream-K")
void Search::preferStreamK() {
  const int64_t wide = ceilDiv(c.m, 128) * ceilDiv(c.n, 256);  // tiles of 128 x 256 (no other output axes, below)
  if (model != Model::WgmmaComputeBound || stages != 1 || c.outerPoints != 1 || wide < 2 * p.target.smCount ||
      wide % p.target.smCount == 0)
    return;
  auto it = std::find_if(out.considered.begin(), out.considered.end(),
                         [](const ProductCandidate& x) { return x.tileM == 128 && x.tileN == 256 && x.split == 1; });
  if (it != out.considered.end()) {
    out.best = *it;
    out.streamK = true;
  }
}

// mma.sync tiles of 32, 64 or 128 a side, not much larger than m and n, accumulators within 128 registers per thread.
void Search::considerMmaSyncTiles() {
  for (int64_t tileM : {32, 64, 128})
    for (int64_t tileN : {32, 64, 128})
      for (int64_t split : {1, 2, 4, 8}) {
        if (tileM > std::max<int64_t>(32, ceilDiv(c.m, 32) * 32) || tileN > std::max<int64_t>(32, ceilDiv(c.n, 32) * 32)) continue;
        if (stages * tileM * tileN / 128 > 128) continue;  // accumulator registers per thread
        if (!splits(split)) continue;
        consider(tileM, tileN, split, out.predict(tileM, tileN, split));  // a clear gain only
      }
}

}  // namespace

ProductPrediction predictProductShape(const Program& p, const TiledContraction& s, const Contraction& c) {
  const std::vector<size_t> src = aSources(c);
  int64_t aOperands = 0;
  for (size_t st = 0; st < src.size(); ++st) aOperands += src[st] == st;
  const int64_t bytes = dtypeBytes(s.mmaType);
  const bool wgmma = s.instruction == TiledContraction::Instruction::Wgmma;
  const Model model = !wgmma ? Model::MmaSync : computeBound(p.target, s, c) ? Model::WgmmaComputeBound : Model::WgmmaStreaming;
  ProductPrediction out;
  out.predict = [=, &p](int64_t tileM, int64_t tileN, int64_t split) {
    return predictMicros(p.target, c, aOperands, tileM, tileN, split, bytes, model);
  };
  out.current = {s.tileM, s.tileN, 1, out.predict(s.tileM, s.tileN, 1)};
  out.best = out.current;
  Search search{p, s, c, model, static_cast<int64_t>(c.stages.size()), out};
  if (wgmma) {
    search.considerWarpgroupTiles();
    search.preferFewestWaves();
    search.preferStreamK();
  } else {
    search.considerMmaSyncTiles();
  }
  return out;
}

namespace {

// A product read only at some rows of each matrix (loop::ReadOnlyAt: a mixture of experts' products, one per expert)
// skips whole tiles by their rows: a split would leave partials unwritten that its adding kernel reads, so it keeps
// unsplit candidates only. And every row tile multiplies all its rows by each expert it holds: with many experts of a
// few rows each (Qwen3-30B-A3B at 128 tokens: 128 experts of 8 rows), a tile of 256 rows computes 32 times the rows it
// keeps, while the model, which counts every expert's whole product, favours the largest tile; tiles of at most 128
// rows are kept.
void keepRowTiles(ProductPrediction& prediction) {
  constexpr int64_t kMaxRows = 128;
  auto& considered = prediction.considered;
  considered.erase(std::remove_if(considered.begin(), considered.end(),
                                  [](const ProductCandidate& x) { return x.split > 1 || x.tileM > kMaxRows; }),
                   considered.end());
  prediction.streamK = false;
  if (prediction.best.split == 1 && prediction.best.tileM <= kMaxRows) return;
  prediction.best = prediction.current;
  for (const ProductCandidate& x : considered)
    if (x.micros < prediction.best.micros * 0.95) prediction.best = x;
}

}  // namespace

bool shapeProducts(Program& p, const ProductShape* force) {
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    auto* s = std::get_if<TiledContraction>(&p.schedules[i]);
    if (!s || s->instruction == TiledContraction::Instruction::Ffma || !asyncCopyable(p.loop, p.loop.kernels[i], *s)) continue;
    const Contraction c = contractionOf(*s, p.loop.kernels[i]);
    const int64_t stages = static_cast<int64_t>(c.stages.size());
    const bool wgmma = s->instruction == TiledContraction::Instruction::Wgmma;
    ProductPrediction prediction = predictProductShape(p, *s, c);
    if (p.loop.kernels[i].readOnlyAt) keepRowTiles(prediction);
    const ProductCandidate current = prediction.current;
    std::vector<ProductCandidate>& considered = prediction.considered;  // for the runners-up in `model`
    ProductCandidate best = prediction.best;
    std::string chosenBy = prediction.streamK ? "by the stream-K rule (two waves or more, walked as one); the model predicted" : "predicted";
    if (const TabledShape* t = tabledShape(p, s->mmaType, c); t && !force) {  // --product-shapes, if it is a candidate
      auto it = std::find_if(considered.begin(), considered.end(), [&](const ProductCandidate& x) {
        return x.tileM == t->tileM && x.tileN == t->tileN && x.split == t->split;
      });
      if (it == considered.end() || t->perStage)
        userError("--product-shapes: {}: tile {}x{} split {}{} is not one tile-shape-products can give this {} product of {} stage(s), "
                  "{}x{}x{} ({}; splits for single-stage products only, dividing k into slices of 64, at least 256 deep)",
                  t->where, t->tileM, t->tileN, t->split, t->perStage ? " per stage" : "", dtypeName(s->mmaType), stages, c.m, c.n,
                  c.k, wgmma ? "wgmma tiles of 64 or 128 rows by a multiple of 8 up to 256 columns, accumulators within 128 registers"
                             : "tiles of 32, 64 or 128 within the product");
      best = *it;
      chosenBy = fmt::format("from --product-shapes ({}); the model predicted", t->where);
      prediction.streamK = t->streamK;
    }
    if (force) {
      const bool split = force->split > 1 && stages == 1 && !p.loop.kernels[i].readOnlyAt && c.k % (force->split * kAsyncCopyElements) == 0;
      const int64_t ways = split ? force->split : 1;
      best = {force->tileM, force->tileN, ways, prediction.predict(force->tileM, force->tileN, ways)};
    }
    if (best.tileM == current.tileM && best.tileN == current.tileN && best.split == 1 && !prediction.streamK) continue;
    TiledContraction shaped = *s;
    shaped.tileM = best.tileM;
    shaped.tileN = best.tileN;
    shaped.streamK = prediction.streamK && best.split == 1;
    if (wgmma) {  // the ring is sized for the slots of this tile and the reduction each block walks
      Contraction part = c;
      part.k = c.k / best.split;
      shaped.pipelineDepth = ringDepth(p.target, shaped, part);
    }
    auto name = [](const ProductCandidate& x) {
      return fmt::format("{}x{}{}", x.tileM, x.tileN, x.split > 1 ? fmt::format(" split {}", x.split) : std::string());
    };
    std::sort(considered.begin(), considered.end(),
              [](const ProductCandidate& a, const ProductCandidate& b) { return a.micros < b.micros; });
    std::vector<std::string> next;
    for (const ProductCandidate& x : considered)
      if (next.size() < 3 && !(x.tileM == best.tileM && x.tileN == best.tileN && x.split == best.split))
        next.push_back(fmt::format("{} {:.1f}", name(x), x.micros));
    shaped.model = fmt::format("shape-products: {} {} {:.1f} us against {:.1f} us for {}x{}{}", name(best), chosenBy, best.micros,
                               current.micros, current.tileM, current.tileN,
                               next.empty() ? std::string() : fmt::format("; others: {}", fmt::join(next, ", ")));
    if (best.split > 1) {
      splitProduct(p, i, best.split, shaped);
      ++i;  // the kernel adding the partials needs nothing more here
    } else {
      *s = shaped;
    }
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
