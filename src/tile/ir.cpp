#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "kiln/support/error.h"
#include "kiln/tile/contraction.h"
#include "kiln/tile/ir.h"

namespace kiln::tile {

const char* strategyName(Strategy s) {
  switch (s) {
    case Strategy::ThreadPerOutput: return "thread_per_output";
    case Strategy::BlockPerRow: return "block_per_row";
    case Strategy::TiledContraction: return "tiled_contraction";
  }
  return "?";
}

int64_t Schedule::knob(const std::string& name) const {
  auto it = knobs.find(name);
  KILN_ASSERT(it != knobs.end(), "schedule {} has no knob '{}'", strategyName(strategy), name);
  return it->second;
}

namespace {
std::string scheduleString(const Schedule& s) {
  std::string knobs;
  for (auto& [k, v] : s.knobs) knobs += fmt::format("{}{}={}", knobs.empty() ? "" : ", ", k, v);
  return fmt::format("{}({})", strategyName(s.strategy), knobs);
}
}  // namespace

std::string print(const Program& p) {
  std::string out = fmt::format("// kiln tile IR: {}\n", p.loop.modelName);
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    const loop::Kernel& k = p.loop.kernels[i];
    out += fmt::format("\nkernel {} writes {}  schedule {}  // {}\n", k.name, p.loop.buffers[k.output].name,
                       scheduleString(p.schedules[i]), fmt::join(k.origins, "; "));
    out += loop::printKernelBody(p.loop, k);
  }
  return out;
}

nlohmann::json toJson(const Program& p) {
  nlohmann::json j = loop::toJson(p.loop);
  j["level"] = "tile";
  for (size_t i = 0; i < p.schedules.size(); ++i) {
    j["kernels"][i]["schedule"] = {{"strategy", strategyName(p.schedules[i].strategy)}, {"knobs", p.schedules[i].knobs}};
  }
  return j;
}

int64_t operandSliceBytes(const Schedule& s, int64_t stages, int64_t tileK) {
  const int64_t tm = s.knob("tile_m"), tn = s.knob("tile_n");
  return stages * (s.knobs.count("mma_pairs") ? (tm + tn) * (tileK + 8) * 2 : (tm + tn + 2) * tileK * 4);
}

void verify(const Program& p) {
  loop::verify(p.loop);
  KILN_ASSERT(p.schedules.size() == p.loop.kernels.size(), "{} schedules for {} kernels", p.schedules.size(), p.loop.kernels.size());
  for (size_t i = 0; i < p.schedules.size(); ++i) {
    const Schedule& s = p.schedules[i];
    const loop::Kernel& k = p.loop.kernels[i];
    if (s.strategy == Strategy::BlockPerRow) {
      KILN_ASSERT(!k.stages.empty(), "kernel {}: block_per_row needs a reduction", k.name);
      int64_t t = s.knob("threads");
      KILN_ASSERT(t >= 32 && t <= 1024 && (t & (t - 1)) == 0, "kernel {}: threads={} must be a power of two in [32, 1024]", k.name, t);
    } else if (s.strategy == Strategy::TiledContraction) {
      auto c = findContraction(k, static_cast<int>(s.knob("m_axis")), static_cast<int>(s.knob("n_axis")));
      KILN_ASSERT(c.has_value(), "kernel {}: tiled_contraction on a kernel that is not a contraction over m_axis={} n_axis={}",
                  k.name, s.knob("m_axis"), s.knob("n_axis"));
      int64_t tm = s.knob("tile_m"), tn = s.knob("tile_n"), tk = s.knob("tile_k");
      if (auto mma = scheduledTensorCoreType(s)) {
        auto side = [](int64_t t) { return t == 32 || t == 64 || t == 128; };
        KILN_ASSERT(side(tm) && side(tn) && tk > 0 && tk % 16 == 0,
                    "kernel {}: tensor-core tiles are 32, 64 or 128 on each side with tile_k a multiple of 16, not {}x{}x{}",
                    k.name, tm, tn, tk);
      } else {
        int64_t um = s.knob("micro_m"), un = s.knob("micro_n");
        KILN_ASSERT(tm > 0 && tn > 0 && tk > 0 && um > 0 && un > 0 && tm % um == 0 && tn % un == 0,
                    "kernel {}: tiles {}x{}x{} with micro tile {}x{} do not divide", k.name, tm, tn, tk, um, un);
        int64_t threads = (tm / um) * (tn / un);
        KILN_ASSERT(threads >= 32 && threads <= 1024, "kernel {}: tiled_contraction with {} threads", k.name, threads);
      }
      KILN_ASSERT(!s.knobs.count("mma_pairs") || scheduledTensorCoreType(s), "kernel {}: mma_pairs without tensor cores", k.name);
      KILN_ASSERT(operandSliceBytes(s, static_cast<int64_t>(c->stages.size()), tk) <= kStaticSharedBytes,
                  "kernel {}: operand tiles exceed 48 KiB of shared memory", k.name);
    } else {
      int64_t b = s.knob("block");
      KILN_ASSERT(b >= 1 && b <= 1024, "kernel {}: block={} out of [1, 1024]", k.name, b);
    }
  }
}

}  // namespace kiln::tile
