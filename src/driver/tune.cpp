// `kiln tune` (issue 46): the schedule space of a model's tensor-core matrix products (kiln/tile/space.h). --dry-run
// compiles every candidate of every distinct product through the Tile passes from tile-shape-products on (the candidate
// forced by a --product-shapes entry, as a search would measure it) and tile::verify, and lists them with the model's
// prediction, the analytic choice marked. Measuring them on a GPU, the search and the tuning database come next.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <ostream>

#include "kiln/driver/commands.h"
#include "kiln/driver/pipeline.h"
#include "kiln/support/error.h"
#include "kiln/tile/space.h"

namespace kiln {
namespace {

using json = nlohmann::json;

constexpr const char* kShapePass = "tile-shape-products";

// Runs the Tile passes of the pipeline from `from` (inclusive) to `to` (exclusive) on p, as compileModel would.
void runTilePasses(tile::Program& p, const PipelineOptions& opts, size_t from, size_t to) {
  const auto& passes = tilePasses();
  for (size_t i = from; i < to && i < passes.size(); ++i)
    if (opts.runs(*findPass(passes[i].name))) passes[i].run(p);
}

size_t shapePassIndex() {
  const auto& passes = tilePasses();
  for (size_t i = 0; i < passes.size(); ++i)
    if (std::string(passes[i].name) == kShapePass) return i;
  internalError(__FILE__, __LINE__, "the Tile pipeline has no tile-shape-products");
}

// Empty when candidate c of s compiles through the rest of the Tile pipeline and verifies; otherwise why not.
std::string refusal(const tile::Program& base, const PipelineOptions& opts, const tile::ProductSpace& s,
                    const tile::SpaceCandidate& c) {
  tile::Program p = base;
  p.productShapes = {tile::tableEntry(s, c)};
  try {
    runTilePasses(p, opts, shapePassIndex(), tilePasses().size());
    tile::verify(p);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::string kernelNames(const tile::Program& p, const std::vector<int>& kernels) {
  std::string out;
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (i == 3) return out + fmt::format(" and {} more", kernels.size() - 3);
    out += (i ? ", " : "") + p.loop.kernels[static_cast<size_t>(kernels[i])].name;
  }
  return out;
}

}  // namespace

int runTune(const TuneCommand& c, std::ostream& out) {
  if (!c.dryRun)
    usageError("kiln tune measures candidates on a GPU, which is not built yet; --dry-run lists and verifies them");
  const Target& target = checkArch(c.arch);
  Compiled compiled = compileModel(c.model, parseInputs(c.inputs), c.pipeline, "loop", parseCast(c.dtype), target);
  tile::Program base = tile::lowerFromLoop(compiled.loopIR, target);
  runTilePasses(base, c.pipeline, 0, shapePassIndex());
  const std::vector<tile::ProductSpace> spaces = tile::productSpaces(base);

  json report{{"model", compiled.loopIR.modelName}, {"arch", target.arch}, {"products", json::array()}};
  size_t total = 0, refused = 0;
  std::string text;
  for (const tile::ProductSpace& s : spaces) {
    json& j = report["products"].emplace_back(json{{"key", s.key()}, {"kernels", json::array()}, {"candidates", json::array()}});
    for (int k : s.kernels) j["kernels"].push_back(base.loop.kernels[static_cast<size_t>(k)].name);
    text += fmt::format("\nproduct {} ({} kernel{}: {})\n", s.key(), s.kernels.size(), s.kernels.size() == 1 ? "" : "s",
                        kernelNames(base, s.kernels));
    for (const tile::SpaceCandidate& x : s.candidates) {
      std::string why = refusal(base, c.pipeline, s, x);
      ++total;
      refused += !why.empty();
      j["candidates"].push_back({{"tile_m", x.tileM}, {"tile_n", x.tileN}, {"split", x.split}, {"stream_k", x.streamK},
                                 {"predicted_us", x.micros}, {"analytic", x.analytic}, {"verifies", why.empty()},
                                 {"refused", why}});
      text += fmt::format("  {:<24} {:>9.1f} us predicted{}{}\n", x.name(), x.micros, x.analytic ? "  <- analytic choice" : "",
                          why.empty() ? "" : "  REFUSED: " + printable(why));
    }
  }
  report["candidates"] = total;
  report["refused"] = refused;
  if (c.json) {
    out << report.dump(2) << "\n";
  } else {
    out << fmt::format("kiln tune --dry-run: {} ({}): {} distinct tensor-core product{}, {} candidates, {} verify{}\n",
                       printable(compiled.loopIR.modelName), target.arch, spaces.size(), spaces.size() == 1 ? "" : "s",
                       total, total - refused, refused ? fmt::format(", {} refused", refused) : std::string())
        << text;
    if (spaces.empty())
      out << "(no product here runs on tensor cores with a shape tile-shape-products chooses: nothing to tune)\n";
  }
  return refused ? 1 : 0;
}

}  // namespace kiln
