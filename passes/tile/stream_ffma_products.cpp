// tile-stream-ffma-products: matrix products on CUDA cores (f32 operands, no TF32) whose operands are k-contiguous f32
// loads (tile::asyncCopyable) stream their slices with 16-byte cp.async into a ring of rows_f32 slices ([row][16 + 4]
// f32) and give each of 256 threads a micro tile of up to 8 x 8 outputs, read as 16-byte vectors of 4 k: 16
// multiply-adds per shared load at 8 x 8, where the schedule it replaces (k-major slices, one scalar load per operand
// value, at most 4 x 4 outputs per thread) issues 2, and stalls on its register-staged copies once per slice.
//
// Tile and split come from a model of one SM's multiply-add rate, per candidate (tile_m x tile_n with micro
// tile_m / 16 x tile_n / 16: 128x128, 64x128, 128x64, 64x64, 32x128, 32x64, 64x32, 32x32; split S in 1, 2, 4, 8 for
// single-stage products, K / S a multiple of 16 and at least 128):
//   issue efficiency = 4 um un / (4 um un + um + un + 4)      (multiply-adds among the instructions of 4 k: the vector
//                                                             loads and the loop's own)
//   compute          = waves * tile_m * tile_n * (K / S) * stages / (the Target's f32 rate per SM * efficiency)
//   memory           = (A once + the weights once, again per row of tiles when they exceed half the L2, + the partials
//                       8 bytes per output per split) / bandwidth
//   time             = max(compute, memory) + (S > 1: 2 us for the kernel adding the partials)
// with waves = ceil(blocks / SMs). Micro tiles keep stages x um x un within 64 accumulators per thread. A product of
// several stages (a SwiGLU's gate and up, which share x) is also priced as one single-stage product per stage (each
// with its own tile and split candidates, x read once per stage) plus the kernel adding their partials and applying
// the epilogue: the stages then take 8 x 8 micro tiles and splits, which the shared accumulators deny them.
// The chosen schedule's `model` says what was predicted and the runners-up (`kiln compile --explain-schedule`).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "kiln/support/error.h"
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {
namespace {

constexpr double kSplitKernelMicros = 2.0;
constexpr int64_t kStreamedTileK = 16;
constexpr int64_t kMaxAccumulators = 64;

struct Shape {
  int64_t tileM, tileN, split;
  double micros = 0;
  bool separate = false;  // a product of several stages as one single-stage product per stage (splitProduct)
};

double predictMicros(const Target& target, const Contraction& c, int64_t aOperands, int64_t tileM, int64_t tileN, int64_t split) {
  const int64_t um = tileM / 16, un = tileN / 16, stages = static_cast<int64_t>(c.stages.size());
  const int64_t tm = ceilDiv(c.m, tileM), tn = ceilDiv(c.n, tileN), blocks = c.outerPoints * tm * tn * split;
  const double efficiency = static_cast<double>(4 * um * un) / static_cast<double>(4 * um * un + um + un + 4);
  const double perSm = target.f32FlopsPerSecond / 2.0 / static_cast<double>(target.smCount);  // multiply-adds per second
  const double waves = static_cast<double>(ceilDiv(blocks, target.smCount));
  const double compute = waves * static_cast<double>(tileM * tileN * (c.k / split) * stages) / (perSm * efficiency);
  const double weights = static_cast<double>(c.outerPoints * c.n * c.k * stages * 4);
  double bytes = static_cast<double>(c.outerPoints * c.m * c.k * aOperands * 4) + weights * static_cast<double>(weights > target.l2Bytes / 2 ? tm : 1);
  if (split > 1) bytes += 8.0 * static_cast<double>(split * c.outerPoints * c.m * c.n);
  const double memory = bytes / (target.memoryBandwidthGBs * 1e9);
  return std::max(compute, memory) * 1e6 + (split > 1 ? kSplitKernelMicros : 0.0);
}

// The streamed schedule of kernel i, when it is an f32 product on CUDA cores whose operands cp.async can copy.
std::optional<TiledContraction> streamedSchedule(const Program& p, size_t i) {
  auto* s = std::get_if<TiledContraction>(&p.schedules[i]);
  if (!s || s->instruction != TiledContraction::Instruction::Ffma || s->a.copy == TiledContraction::Copy::CpAsync)
    return std::nullopt;
  TiledContraction streamed = *s;
  streamed.a = streamed.b = TiledContraction::Operand{TiledContraction::Copy::CpAsync, TiledContraction::SharedLayout::RowsF32};
  streamed.tileK = kStreamedTileK;
  if (!asyncCopyable(p.loop, p.loop.kernels[i], streamed)) return std::nullopt;
  return streamed;
}

// Appends the candidates for `cc` (the product c itself, or with `separate` one of its stages alone, priced for all of
// them) to `considered`.
void considerShapes(const Target& target, const Contraction& c, const Contraction& cc, int64_t aOps, bool separate,
                    const TiledContraction& streamed, std::vector<Shape>& considered) {
  const int64_t stages = static_cast<int64_t>(c.stages.size());
  const int64_t ccStages = static_cast<int64_t>(cc.stages.size());
  for (auto [tileM, tileN] : std::vector<std::pair<int64_t, int64_t>>{
           {128, 128}, {64, 128}, {128, 64}, {64, 64}, {32, 128}, {32, 64}, {64, 32}, {32, 32}})
    for (int64_t split : {1, 2, 4, 8}) {
      if (tileM > std::max<int64_t>(32, ceilDiv(c.m, 32) * 32) || tileN > std::max<int64_t>(32, ceilDiv(c.n, 32) * 32)) continue;
      if (ccStages * (tileM / 16) * (tileN / 16) > kMaxAccumulators) continue;
      if (split > 1 && (ccStages != 1 || c.k % (split * kStreamedTileK) != 0 || c.k / split < 128)) continue;
      TiledContraction sized = streamed;
      sized.tileM = tileM;
      sized.tileN = tileN;
      Contraction part = cc;
      part.k = c.k / split;
      if (ringDepth(target, sized, part) == 0) continue;
      double t = predictMicros(target, cc, aOps, tileM, tileN, split);
      if (separate) t = static_cast<double>(stages) * (t - (split > 1 ? kSplitKernelMicros : 0.0)) + kSplitKernelMicros;
      considered.push_back({tileM, tileN, split, t, separate});
    }
}

// Every shape the pass may give product c, in the order they are priced.
std::vector<Shape> candidateShapes(const Target& target, const Contraction& c, const TiledContraction& streamed) {
  const std::vector<size_t> src = aSources(c);
  int64_t aOperands = 0;
  for (size_t st = 0; st < src.size(); ++st) aOperands += src[st] == st;
  std::vector<Shape> considered;
  considerShapes(target, c, c, aOperands, false, streamed, considered);
  // Several stages (a SwiGLU's gate and up) share a thread's accumulators, which keeps their micro tiles small, and cannot
  // split their reductions in one kernel; as one product per stage they can, for a kernel adding the partials.
  if (c.stages.size() > 1) {
    Contraction one = c;
    one.stages.resize(1);
    considerShapes(target, c, one, 1, true, streamed, considered);
  }
  return considered;
}

// The shape for product c: the table's (--product-shapes), which must be a candidate, or else the first of the fastest
// predicted; `chosenBy` says which.
Shape chooseShape(const Program& p, const Contraction& c, const std::vector<Shape>& considered, std::string& chosenBy) {
  Shape best{0, 0, 1, std::numeric_limits<double>::infinity()};
  for (const Shape& x : considered)
    if (x.micros < best.micros) best = x;
  chosenBy = "predicted";
  if (const TabledShape* t = tabledShape(p, DType::F32, c)) {
    auto it = std::find_if(considered.begin(), considered.end(), [&](const Shape& x) {
      return x.tileM == t->tileM && x.tileN == t->tileN && x.split == t->split && x.separate == t->perStage;
    });
    if (it == considered.end())
      userError("--product-shapes: {}: tile {}x{} split {}{} is not one tile-stream-ffma-products can give this f32 product of {} "
                "stage(s), {}x{}x{} (tiles of 32, 64 or 128 within the product, up to 64 accumulators per thread, splits "
                "dividing k into slices of 16, at least 128 deep)", t->where, t->tileM, t->tileN, t->split,
                t->perStage ? " per stage" : "", c.stages.size(), c.m, c.n, c.k);
    best = *it;
    chosenBy = fmt::format("from --product-shapes ({}); the model predicted", t->where);
  }
  return best;
}

std::string shapeName(const Shape& x) {
  return fmt::format("{}x{}{}{}", x.tileM, x.tileN, x.split > 1 ? fmt::format(" split {}", x.split) : std::string(),
                     x.separate ? " per stage" : "");
}

// The schedule's `model`: the chosen shape, how it was chosen, its predicted time and the three fastest others.
std::string modelNote(const Shape& best, const std::string& chosenBy, std::vector<Shape> considered) {
  std::sort(considered.begin(), considered.end(), [](const Shape& a, const Shape& b) { return a.micros < b.micros; });
  std::vector<std::string> next;
  for (const Shape& x : considered)
    if (next.size() < 3 && !(x.tileM == best.tileM && x.tileN == best.tileN && x.split == best.split && x.separate == best.separate))
      next.push_back(fmt::format("{} {:.1f}", shapeName(x), x.micros));
  return fmt::format("stream-ffma-products: {} {} {:.1f} us{}", shapeName(best), chosenBy, best.micros,
                     next.empty() ? std::string() : fmt::format("; others: {}", fmt::join(next, ", ")));
}

// `streamed` with the tiles and micro tiles of `shape`, and the ring depth its slices of product c allow.
void giveShape(TiledContraction& streamed, const Target& target, const Contraction& c, const Shape& shape) {
  streamed.tileM = shape.tileM;
  streamed.tileN = shape.tileN;
  streamed.microM = shape.tileM / 16;
  streamed.microN = shape.tileN / 16;
  Contraction part = c;
  part.k = c.k / shape.split;
  if (shape.separate) part.stages.resize(1);
  streamed.pipelineDepth = ringDepth(target, streamed, part);
}

}  // namespace

bool streamFfmaProducts(Program& p) {
  if (!p.target.cpAsync || p.target.f32FlopsPerSecond <= 0) return false;
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    std::optional<TiledContraction> streamed = streamedSchedule(p, i);
    if (!streamed) continue;
    const Contraction c = contractionOf(std::get<TiledContraction>(p.schedules[i]), p.loop.kernels[i]);
    std::vector<Shape> considered = candidateShapes(p.target, c, *streamed);
    if (considered.empty()) continue;
    std::string chosenBy;
    const Shape best = chooseShape(p, c, considered, chosenBy);
    giveShape(*streamed, p.target, c, best);
    streamed->model = modelNote(best, chosenBy, std::move(considered));
    if (best.split > 1 || best.separate) {
      splitProduct(p, i, best.split, *streamed);
      i += best.separate ? c.stages.size() : 1;  // past the partial products; the adding kernel needs nothing more
    } else {
      std::get<TiledContraction>(p.schedules[i]) = *streamed;
    }
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
