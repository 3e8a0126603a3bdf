// Runs passes with kiln's debugging vocabulary (DESIGN.md §3.7): -v names each pass, -vv/--print-after-all
// prints a unified diff of the IR after each pass that changed it, --print-after=PASS prints the IR,
// --stop-after=PASS stops there, --dump-dir writes one numbered file per pass, --time-passes reports time.
// Each pass's IR is verified after it runs (verify() found by argument-dependent lookup).
#pragma once
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <iosfwd>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kiln/support/error.h"

namespace kiln {
class OutputDir;  // kiln/support/output.h

struct PassInfo {
  std::string name, level, description;
  bool onByDefault = true;  // false: a pass not yet checked on the GPU, run only with --enable-pass NAME
};
const std::vector<PassInfo>& allPasses();
const PassInfo* findPass(const std::string& name);
// Whether the pass produces its level's IR (the first of its level: an import, a lowering or the emitter)
// rather than rewriting an IR in place.
bool isLowering(const PassInfo& pass);
const std::vector<std::string>& allLevels();  // torch, tensor, loop, tile, kernel, cuda

struct PipelineOptions {
  int verbosity = 0;                 // 1: pass names; 2: diffs of changed IR
  std::set<std::string> printAfter;  // pass names
  std::optional<std::string> stopAfter;
  std::string dumpDir;               // --dump-dir: under -o's rules (kiln/support/output.h), written when the run ends
  bool timePasses = false;
  bool verify = true;
  std::ostream* log = nullptr;       // where -v, diffs and timings go (stderr by default)
  std::set<std::string> enable, disable;  // --enable-pass / --disable-pass: in-level passes to run or skip
  std::string productShapes;         // --product-shapes FILE: product tiles and splits chosen outside kiln's models
  // The forward also returns, as its second output, the greedy token at every position (torch::appendGreedyToken,
  // applied at import): kiln generate's entry points.
  bool greedyTokens = false;
  // --tensor-parallel N --rank R: compile rank R's part of the model split over N devices (tensor-shard).
  int tensorParallel = 1;
  int rank = 0;
  bool runs(const PassInfo& pass) const;  // whether the pipeline runs this in-level pass
};

// Thrown by PassRunner when --stop-after's pass has run; carries that pass's IR text.
struct StopRequested {
  std::string pass, irText;
};

class PassRunner {
 public:
  explicit PassRunner(PipelineOptions opts);
  ~PassRunner();

  // Runs an in-level pass: fn(ir) returns whether it changed something. Skipped when the options say so.
  // A compiler bug inside it (InternalError) is rethrown naming the pass, with the IR as it stood when the pass
  // failed written to a fresh temporary file whose path the message gives (DESIGN.md §3.6).
  template <class IR, class Fn>
  void pass(IR& ir, const std::string& name, Fn&& fn) {
    if (skipped(name)) return;
    started(name);
    auto t0 = std::chrono::steady_clock::now();
    bool changed = false;
    try {
      changed = fn(ir);
    } catch (const InternalError& e) {
      failed(name, "in pass", e, [&] { return print(ir); });
    }
    finish(name, t0, changed, [&] { return print(ir); }, [&] { verify(ir); });
  }

  // Runs a pass that produces a new IR (an import or a lowering).
  // A compiler bug inside it is rethrown naming the pass (its output does not exist yet: no IR is written).
  template <class Fn>
  auto produce(const std::string& name, Fn&& fn) -> decltype(fn()) {
    started(name);
    auto t0 = std::chrono::steady_clock::now();
    decltype(fn()) ir;
    try {
      ir = fn();
    } catch (const InternalError& e) {
      failed(name, "in pass", e, nullptr);
    }
    finish(name, t0, true, [&] { return print(ir); }, [&] { verify(ir); });
    return ir;
  }

  void printTimings();
  // The IR the first pass runs on came from text (`kiln opt`), not from a pass: -vv diffs that pass against it.
  void startFrom(std::string irText) { previousText_ = std::move(irText); }

 private:
  bool skipped(const std::string& name);  // not run per opts_.runs(); says so under -v
  void started(const std::string& name);  // the progress line (kiln/support/progress.h) names the pass
  // Rethrows `e` naming the pass `name` (`where`: "in pass" or "verifier after pass") and, given `text`, the
  // temporary file the IR was written to.
  [[noreturn]] void failed(const std::string& name, const char* where, const InternalError& e,
                           const std::function<std::string()>& text);
  void finish(const std::string& name, std::chrono::steady_clock::time_point t0, bool changed,
              const std::function<std::string()>& text, const std::function<void()>& verifyFn);

  PipelineOptions opts_;
  std::unique_ptr<OutputDir> dump_;  // --dump-dir's files, moved into place when the runner ends (failed or not)
  std::string previousText_;
  int index_ = 0;
  std::chrono::steady_clock::time_point begun_ = std::chrono::steady_clock::now();
  std::vector<std::pair<std::string, double>> timings_;
};

// Line-based unified diff (for -vv and golden-test failures).
std::string unifiedDiff(const std::string& before, const std::string& after, const std::string& fromName,
                        const std::string& toName);

}  // namespace kiln
