// `kiln opt FILE --level loop|tile|kernel --passes a,b,c [-o OUT]`: reads IR text, runs the named passes in order with
// the verifier after each (PassRunner, as the pipeline does), and prints the result, as mlir-opt does. What a per-pass
// test (tests/passes/) runs: a pass seen on a small input, without compiling a model.
//
// The passes are those of the IR's level, looked up in the pipeline's own tables (kiln/driver/pipeline.h), and the
// lowering to the next level (tile-lower-from-loop on Loop IR, kernel-lower-from-tile on Tile IR), after which the
// next level's passes run: `--level tile --passes tile-unroll-rings,kernel-lower-from-tile` prints Kernel IR.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <variant>

#include "kiln/driver/commands.h"
#include "kiln/driver/pipeline.h"
#include "kiln/kernel/lower.h"
#include "kiln/kernel/parser.h"
#include "kiln/loop/parser.h"
#include "kiln/support/error.h"
#include "kiln/support/output.h"
#include "kiln/support/pipeline.h"
#include "kiln/tile/parser.h"

namespace kiln {
namespace {

using AnyIR = std::variant<loop::Program, tile::Program, kernel::Program>;

const char* levelName(const AnyIR& ir) {
  return std::holds_alternative<loop::Program>(ir) ? "loop" : std::holds_alternative<tile::Program>(ir) ? "tile" : "kernel";
}

template <class IR>
const std::vector<InLevelPass<IR>>& passesOf(const IR&);
template <>
const std::vector<InLevelPass<loop::Program>>& passesOf(const loop::Program&) { return loopPasses(); }
template <>
const std::vector<InLevelPass<tile::Program>>& passesOf(const tile::Program&) { return tilePasses(); }
template <>
const std::vector<InLevelPass<kernel::Program>>& passesOf(const kernel::Program&) { return kernelPasses(); }

// The verifier's message without the assertion's prefix: the input's fault, not kiln's.
std::string verifierMessage(const InternalError& e) {
  std::string what = e.what();
  size_t at = what.find("IR verifier: ");
  return at == std::string::npos ? what : what.substr(at + 13);
}

template <class IR>
IR verifiedInput(IR ir, const OptCommand& c, const char* level) {
  try {
    verify(ir);
  } catch (const InternalError& e) {
    userError("{}: not valid {} IR: {}", printable(c.file), level, verifierMessage(e));
  }
  return ir;
}

AnyIR readInput(const OptCommand& c) {
  if (c.level == "loop") return verifiedInput(loop::parseFile(c.file), c, "Loop");
  if (c.level == "tile") return verifiedInput(tile::parseFile(c.file), c, "Tile");
  return verifiedInput(kernel::parseFile(c.file), c, "Kernel");
}

// The lowering from the IR's level to the next one, as the pipeline calls it; nullopt where `name` is not that lowering.
std::optional<AnyIR> lowerToNext(PassRunner& run, AnyIR& ir, const std::string& name, const Target& target) {
  if (auto* l = std::get_if<loop::Program>(&ir); l && name == "tile-lower-from-loop")
    return run.produce(name, [&] { return tile::lowerFromLoop(*l, target); });
  if (auto* t = std::get_if<tile::Program>(&ir); t && name == "kernel-lower-from-tile")
    return run.produce(name, [&] { return kernel::lowerFromTile(*t); });
  return std::nullopt;
}

// The level whose IR the lowering `pass` reads, or "" where it is not a lowering kiln opt runs.
std::string loweringInput(const PassInfo& pass) {
  if (!isLowering(pass)) return "";
  return pass.level == "tile" ? "loop" : pass.level == "kernel" ? "tile" : "";
}

// Checks the whole --passes sequence before the file is read: each pass one of the IR's level at that point, or the
// lowering from it to the next level (after which the next level's passes follow).
void checkSequence(const OptCommand& c) {
  if (c.level != "loop" && c.level != "tile" && c.level != "kernel")
    usageError("--level {}: kiln opt reads loop, tile or kernel IR", c.level);
  std::string level = c.level;
  for (const std::string& name : c.passes) {
    checkPassName(name);
    const PassInfo& pass = *findPass(name);
    if (loweringInput(pass) == level) {
      level = pass.level;
    } else if (pass.level == level && isLowering(pass)) {
      usageError("--passes {}: it produces {} IR from the level above; give kiln opt that level's IR", name, level);
    } else if (pass.level != level) {
      usageError("--passes {}: a {} pass, but the IR is {} IR at that point; kiln opt runs the passes of the IR's level "
                 "and the lowering to the next one",
                 name, pass.level, level);
    }
  }
}

// Runs `name` on ir (checkSequence has checked it): an in-level pass, or the lowering to the next level.
void runPass(PassRunner& run, AnyIR& ir, const std::string& name, const Target& target) {
  if (std::optional<AnyIR> next = lowerToNext(run, ir, name, target)) {
    ir = std::move(*next);
    return;
  }
  const bool done = std::visit(
      [&](auto& program) {
        for (const auto& p : passesOf(program))
          if (name == p.name) return run.pass(program, name, p.run), true;
        return false;
      },
      ir);
  KILN_ASSERT(done, "pass {} of level {} is in passes.def but not in the pipeline's table of its level", name, levelName(ir));
}

}  // namespace

int runOpt(const OptCommand& c, std::ostream& out) {
  checkSequence(c);
  const Target& target = checkArch(c.arch);
  AnyIR ir = readInput(c);
  PipelineOptions options = c.pipeline;
  options.enable.insert(c.passes.begin(), c.passes.end());  // named: run, off by default or not
  PassRunner run(options);
  if (c.pipeline.verbosity >= 2) run.startFrom(std::visit([](const auto& p) { return print(p); }, ir));
  for (const std::string& name : c.passes) runPass(run, ir, name, target);
  run.printTimings();
  std::string text = std::visit([](const auto& p) { return print(p); }, ir);
  if (c.output.empty()) out << text;
  else writeOutputFile(c.output, text);
  return 0;
}

}  // namespace kiln
