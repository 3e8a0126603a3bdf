// `kiln opt FILE --level kernel --passes a,b,c [-o OUT]`: reads IR text, runs the named passes of that level in order
// with the verifier after each (PassRunner, as the pipeline does), and prints the result, as mlir-opt does. What a
// per-pass test (tests/passes/) runs: a pass seen on a small input, without compiling a model.
//
// One level per branch: a level names its parser, its verifier and its in-level passes (the functions the pipeline
// calls for them, by their passes.def names). Kernel IR only for now; Tile IR is the next branch once it parses.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>
#include <map>

#include "kiln/driver/commands.h"
#include "kiln/kernel/lower.h"
#include "kiln/kernel/parser.h"
#include "kiln/support/error.h"
#include "kiln/support/output.h"
#include "kiln/support/pipeline.h"

namespace kiln {
namespace {

template <class IR>
using PassTable = std::map<std::string, std::function<bool(IR&)>>;

// Kernel IR's in-level passes (those that rewrite it in place, in passes.def's order).
const PassTable<kernel::Program>& kernelPasses() {
  static const PassTable<kernel::Program> table = {{"kernel-overlap-launches", kernel::overlapLaunches}};
  return table;
}

// Every name a registered pass of `level` that rewrites that level's IR: not unknown, not of another level, not the
// lowering that produces the level from the one above (its input is another IR).
template <class IR>
void checkPasses(const std::vector<std::string>& names, const std::string& level, const PassTable<IR>& table) {
  for (const std::string& name : names) {
    checkPassName(name);
    const PassInfo& pass = *findPass(name);
    if (pass.level != level)
      usageError("--passes {}: a {} pass; `kiln opt --level {}` runs {} passes only", name, pass.level, level, level);
    if (isLowering(pass))
      usageError("--passes {}: it produces {} IR from the level above; `kiln opt` runs passes within one level", name, level);
    KILN_ASSERT(table.count(name), "pass {} of level {} is in passes.def but not in kiln opt's table", name, level);
  }
}

// The verifier's message without the assertion's prefix: the input's fault, not kiln's.
std::string verifierMessage(const InternalError& e) {
  std::string what = e.what();
  size_t at = what.find("IR verifier: ");
  return at == std::string::npos ? what : what.substr(at + 13);
}

template <class IR>
std::string runPasses(IR ir, const OptCommand& c, const PassTable<IR>& table) {
  PassRunner run(c.pipeline);
  if (c.pipeline.verbosity >= 2) run.startFrom(print(ir));
  for (const std::string& name : c.passes) run.pass(ir, name, table.at(name));
  run.printTimings();
  return print(ir);
}

std::string optKernel(const OptCommand& c) {
  checkPasses(c.passes, "kernel", kernelPasses());
  kernel::Program p = kernel::parseFile(c.file);
  try {
    kernel::verify(p);
  } catch (const InternalError& e) {
    userError("{}: not valid Kernel IR: {}", printable(c.file), verifierMessage(e));
  }
  return runPasses(std::move(p), c, kernelPasses());
}

}  // namespace

int runOpt(const OptCommand& c, std::ostream& out) {
  std::string text;
  if (c.level == "kernel") text = optKernel(c);
  else usageError("--level {}: kiln opt reads Kernel IR only (--level kernel)", c.level);
  if (c.output.empty()) out << text;
  else writeOutputFile(c.output, text);
  return 0;
}

}  // namespace kiln
