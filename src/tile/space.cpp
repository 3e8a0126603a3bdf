// tile::productSpaces (kiln/tile/space.h): the candidates tile-shape-products' model considers, per distinct product.
#include "kiln/tile/space.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "kiln/tile/contraction.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

std::string SpaceCandidate::name() const {
  return fmt::format("{}x{}{}{}", tileM, tileN, split > 1 ? fmt::format(" split {}", split) : std::string(),
                     streamK ? " stream-K" : "");
}

std::string ProductSpace::key() const {
  return fmt::format("{} {}x{}x{}, {} stage{}{}", dtypeName(type), m, n, k, stages, stages == 1 ? "" : "s",
                     outer > 1 ? fmt::format(", {} outer points", outer) : std::string());
}

namespace {

// The candidates of one product: the model's considered tiles and splits, and the stream-K walk of 128 x 256 where the
// stream-K rule takes it (the plain 128 x 256 tile stays a candidate beside it). Stream-K elsewhere is not offered: the
// rule's conditions are where tile-stream-k-products was measured to help and what it supports.
std::vector<SpaceCandidate> candidatesOf(const ProductPrediction& prediction) {
  std::vector<SpaceCandidate> out;
  for (const ProductCandidate& x : prediction.considered) out.push_back({x.tileM, x.tileN, x.split, false, x.micros, false});
  if (prediction.streamK) out.push_back({128, 256, 1, true, prediction.predict(128, 256, 1), false});
  const ProductCandidate& b = prediction.best;
  bool found = false;
  for (SpaceCandidate& c : out)
    if (c.tileM == b.tileM && c.tileN == b.tileN && c.split == b.split && c.streamK == prediction.streamK && !found)
      c.analytic = found = true;
  if (!found)  // the tile tile-tiled-contractions gave it, kept by the model: a candidate too
    out.push_back({b.tileM, b.tileN, b.split, prediction.streamK, b.micros, true});
  std::stable_sort(out.begin(), out.end(), [](const SpaceCandidate& a, const SpaceCandidate& c) { return a.micros < c.micros; });
  return out;
}

}  // namespace

std::vector<ProductSpace> productSpaces(const Program& p) {
  std::vector<ProductSpace> spaces;
  std::map<std::tuple<DType, int64_t, int64_t, int64_t, int64_t, int64_t>, size_t> index;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    const auto* s = std::get_if<TiledContraction>(&p.schedules[i]);
    if (!s || s->instruction == TiledContraction::Instruction::Ffma || !asyncCopyable(p.loop, p.loop.kernels[i], *s))
      continue;  // the products tile-shape-products leaves alone
    const Contraction c = contractionOf(*s, p.loop.kernels[i]);
    const int64_t stages = static_cast<int64_t>(c.stages.size());
    auto key = std::make_tuple(s->mmaType, c.m, c.n, c.k, stages, c.outerPoints);
    auto [it, fresh] = index.emplace(key, spaces.size());
    if (fresh) {
      ProductSpace space;
      space.type = s->mmaType;
      space.m = c.m;
      space.n = c.n;
      space.k = c.k;
      space.stages = stages;
      space.outer = c.outerPoints;
      space.candidates = candidatesOf(predictProductShape(p, *s, c));
      spaces.push_back(std::move(space));
    }
    spaces[it->second].kernels.push_back(static_cast<int>(i));
  }
  return spaces;
}

TabledShape tableEntry(const ProductSpace& s, const SpaceCandidate& c) {
  TabledShape t;
  t.type = s.type;
  t.m = s.m;
  t.n = s.n;
  t.k = s.k;
  t.stages = s.stages;
  t.outer = s.outer;
  t.tileM = c.tileM;
  t.tileN = c.tileN;
  t.split = c.split;
  t.streamK = c.streamK;
  t.where = "kiln tune candidate " + c.name();
  return t;
}

}  // namespace kiln::tile
