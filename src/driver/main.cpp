// kiln: the command-line driver. See README.md for usage.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <new>

#include "kiln/driver/commands.h"
#include "kiln/driver/generate.h"
#include "kiln/tensor/op_catalog.h"
#include "kiln/frontend/expression.h"
#include "kiln/frontend/frontend.h"
#include "kiln/runtime/manifest.h"
#include "kiln/runtime/runtime.h"
#include "kiln/support/error.h"
#include "kiln/support/nearest.h"
#include "kiln/support/target.h"
#include "kiln/tensor/ir.h"

namespace {

// Flags of `compile` and `run` that are parsed into PipelineOptions after validation.
struct PipelineFlags {
  std::vector<std::string> printAfter, enable, disable;
  std::string stopAfter;
  bool printAfterAll = false, noVerify = false;
};

void addPipelineFlags(CLI::App* cmd, kiln::PipelineOptions& p, PipelineFlags& f) {
  cmd->add_option("--enable-pass", f.enable, "run PASS, which is off by default (kiln passes marks them) (repeatable)")->type_name("PASS");
  cmd->add_option("--disable-pass", f.disable, "skip PASS, a pass within a level (repeatable)")->type_name("PASS");
  cmd->add_flag("-v,--verbose", p.verbosity, "-v names each pass as it runs; -vv also prints a diff of the IR after each pass that changed it");
  cmd->add_flag("--print-after-all", f.printAfterAll, "same as -vv");
  cmd->add_option("--print-after", f.printAfter, "print the IR after PASS (repeatable)")->type_name("PASS");
  cmd->add_option("--stop-after", f.stopAfter, "stop after PASS and print its IR")->type_name("PASS");
  cmd->add_option("--dump-dir", p.dumpDir, "write the IR after every pass to DIR, one numbered file per pass")->type_name("DIR");
  cmd->add_flag("--time-passes", p.timePasses, "report the time each pass took");
  cmd->add_flag("--no-verify", f.noVerify, "skip the IR verifiers between passes");
  cmd->add_option("--product-shapes", p.productShapes,
                  "matrix products of the shapes FILE lists take its tile and split instead of the model's (JSON, docs/pipeline.md)")
      ->type_name("FILE");
  cmd->add_option("--tensor-parallel", p.tensorParallel,
                  "split the model over N devices, Megatron style, and compile rank --rank's part (so far to the Tensor "
                  "level only: --ir tensor; docs/tensor-parallel.md)")
      ->type_name("N")->check(CLI::Range(1, 1024));
  cmd->add_option("--rank", p.rank, "the rank of --tensor-parallel to compile (0 by default)")->type_name("R")
      ->check(CLI::NonNegativeNumber);
}

void finishPipelineFlags(kiln::PipelineOptions& p, const PipelineFlags& f) {
  for (auto& n : f.printAfter) {
    kiln::checkPassName(n);
    p.printAfter.insert(n);
  }
  if (!f.stopAfter.empty()) {
    kiln::checkPassName(f.stopAfter);
    p.stopAfter = f.stopAfter;
  }
  for (auto& n : f.enable) {
    kiln::checkPassName(n);
    p.enable.insert(n);
  }
  for (auto& n : f.disable) {
    kiln::checkPassName(n);
    if (kiln::isLowering(*kiln::findPass(n)))
      kiln::usageError("--disable-pass {}: it produces the {} IR, which later passes need; only passes within a level can be skipped",
                       n, kiln::findPass(n)->level);
    p.disable.insert(n);
  }
  std::vector<std::string> printed = f.printAfter;
  if (!f.stopAfter.empty()) printed.push_back(f.stopAfter);
  for (const std::string& n : printed)
    if (!p.runs(*kiln::findPass(n)))
      kiln::usageError("pass {} does not run{}, so there is no IR after it to print or stop at", n,
                       p.disable.count(n) ? " (--disable-pass)" : fmt::format(" (off by default: add --enable-pass {})", n));
  if (f.printAfterAll) p.verbosity = std::max(p.verbosity, 2);
  p.verify = !f.noVerify;
}

// A first argument that is neither an option nor a command: one line naming the nearest command (CLI11 said "A
// subcommand is required", which reads as if none had been given).
void checkCommandName(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return;
  const std::string given = argv[1];
  std::string nearest;
  size_t best = SIZE_MAX;
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == given) return;
    const size_t d = kiln::editDistance(given, sub->get_name());
    if (d < best) best = d, nearest = sub->get_name();
  }
  kiln::usageError("unknown command '{}'{}; kiln --help lists the commands", kiln::printable(given),
                   best <= 3 ? fmt::format(" (did you mean '{}'?)", nearest) : "");
}

// Options of `kiln compile` that choose what it writes: at most one may be given, since each replaces the others' output.
void checkCompileOutputs(const CLI::App& c, const kiln::CompileCommand& compile) {
  std::vector<std::string> given;
  if (c.count("--ir")) given.push_back("--ir");
  if (!compile.emit.empty()) given.push_back("--emit");
  if (compile.explainFusion) given.push_back("--explain-fusion");
  if (compile.explainSchedule) given.push_back("--explain-schedule");
  if (compile.explainMemory) given.push_back("--explain-memory");
  if (given.size() > 1)
    kiln::usageError("{} and {} each choose what kiln compile writes; give one of them", given[0], given[1]);
}

// A command's model: the file given, or the expression of -c traced into a temporary file (kept while the returned
// object lives). UsageError for both or neither.
std::unique_ptr<kiln::frontend::TracedExpression> modelOrExpression(const CLI::App& command, std::string& model,
                                                                    const std::string& expression) {
  const bool hasExpression = command.count("-c") > 0;
  if (hasExpression && !model.empty())
    kiln::usageError("kiln {}: give a model or -c EXPR, not both", command.get_name());
  if (!hasExpression && model.empty())
    kiln::usageError("kiln {} needs a model (MODEL.pt) or -c EXPR (a PyTorch call to trace)", command.get_name());
  if (!hasExpression) return nullptr;
  auto traced = kiln::frontend::traceExpression(expression);
  model = traced->model().string();
  return traced;
}

// `kiln passes`: every pass in pipeline order, those off by default marked.
int listPasses() {
  for (auto& p : kiln::allPasses())
    std::cout << fmt::format("{:30} {}{}\n", p.name, p.description,
                             p.onByDefault ? "" : " [off by default: --enable-pass " + p.name + "]");
  return 0;
}

// `kiln ops [--markdown]`: the supported aten ops, or docs/ops.md's table of them.
int listOps(bool markdown) {
  if (markdown) std::cout << kiln::tensor::opsMarkdown();
  else for (auto& o : kiln::tensor::supportedOps()) std::cout << o << "\n";
  return 0;
}

// `kiln tune`'s options, into `tune` (and -c into `expression`).
CLI::App* addTuneCommand(CLI::App& app, kiln::TuneCommand& tune, std::string& expression, PipelineFlags& flags) {
  auto* t = app.add_subcommand("tune", "the schedule space of a model's tensor-core matrix products: --dry-run lists every "
                                       "candidate tile and split with the model's prediction, each compiled and verified");
  t->add_option("model", tune.model, "TorchScript model (.pt)");
  t->add_option("-c", expression, "instead of a model: a PyTorch call to trace, as kiln compile -c")->type_name("EXPR");
  t->add_flag("--dry-run", tune.dryRun, "list and verify the candidates; measure nothing (needs no GPU)");
  t->add_flag("--json", tune.json, "print the spaces as one JSON object");
  t->add_option("--input", tune.inputs, "override an input: NAME=1x32x2048[:f32] (repeatable)");
  t->add_option("--arch", tune.arch, "target GPU: " + kiln::knownArchList() + " (default " + kiln::kDefaultArch + ")");
  t->add_option("--dtype", tune.dtype, "cast the model's floating-point weights and inputs: f16 or bf16");
  addPipelineFlags(t, tune.pipeline, flags);
  return t;
}

// `kiln generate`'s options, into `generate`.
CLI::App* addGenerateCommand(CLI::App& app, kiln::GenerateCommand& generate, PipelineFlags& passes) {
  auto* gen = app.add_subcommand("generate", "greedy generation with a model that keeps a KV cache (docs/decode.md): the "
                                             "prompt and new token ids on one line; each token picked inside the forward");
  gen->add_option("model", generate.model, "TorchScript decoder-step trace (.pt): forward(ids, pos) -> logits, or a "
                  "directory kiln compile --emit cuda wrote from one (GPU only)")->required();
  gen->add_option("--prompt-ids", generate.promptIds, "the prompt's token ids, comma-separated")->delimiter(',')->required();
  gen->add_option("--max-new-tokens", generate.maxNewTokens, "tokens to generate (default 16)");
  gen->add_option("--prefill-chunk", generate.prefillChunk,
                  "run the prompt C tokens per forward (the trace specialised to C tokens); 0, the default: one token per forward");
  gen->add_flag("--interpret", generate.interpret, "run the Kernel IR in the CPU interpreter instead of on a GPU");
  gen->add_option("--token-input", generate.tokenInput, "the argument taking token ids (default: the first)")->type_name("NAME");
  gen->add_option("--position-input", generate.positionInput, "the argument taking their positions (default: the second)")->type_name("NAME");
  gen->add_option("--save-logits", generate.logitsDir, "write the logits each new token was chosen from, raw f32 (logits0.bin, ...), into DIR, new or empty "
                  "(they are copied back from the GPU only then)")->type_name("DIR");
  gen->add_option("--dtype", generate.dtype, "cast the model's floating-point weights: f16 or bf16");
  gen->add_option("--arch", generate.arch, "target GPU: " + kiln::knownArchList() + " (default " + kiln::kDefaultArch + ")");
  gen->add_option("--enable-pass", passes.enable, "compile the entries with PASS, which is off by default (repeatable)")->type_name("PASS");
  gen->add_option("--disable-pass", passes.disable, "compile the entries without PASS, a pass within a level (repeatable)")
      ->type_name("PASS");
  return gen;
}

int runGenerateCommand(kiln::GenerateCommand& generate, const PipelineFlags& passes) {
  finishPipelineFlags(generate.pipeline, passes);
  return kiln::runGenerate(generate, std::cout, std::cerr);
}

// `kiln opt`'s options, into `opt` and the two flags main() folds into it after parsing.
CLI::App* addOptCommand(CLI::App& app, kiln::OptCommand& opt, bool& optPrintAfterAll, bool& optNoVerify) {
  auto* o = app.add_subcommand("opt", "read IR text, run passes of its level on it with the verifier after each, print the result");
  o->add_option("file", opt.file, "IR text, as kiln compile --ir LEVEL prints it")->required();
  o->add_option("--level", opt.level, "the file's IR level: loop, tile or kernel (the default)");
  o->add_option("--passes", opt.passes, "passes to run, in order (comma-separated): the level's own and the lowering to the next level; none: print the input back")
      ->delimiter(',')
      ->type_name("PASS,...");
  o->add_option("--arch", opt.arch, "with Loop IR and tile-lower-from-loop: the target GPU, " + kiln::knownArchList() + " (default " + kiln::kDefaultArch + "); Tile and Kernel IR name theirs");
  o->add_option("-o,--output", opt.output, "output file (default standard output)");
  o->add_flag("-v,--verbose", opt.pipeline.verbosity, "-v names each pass as it runs; -vv also prints a diff of the IR after each pass that changed it");
  o->add_flag("--print-after-all", optPrintAfterAll, "same as -vv");
  o->add_flag("--time-passes", opt.pipeline.timePasses, "report the time each pass took");
  o->add_flag("--no-verify", optNoVerify, "skip the verifier after each pass (the input is verified still)");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln: compiles TorchScript LLMs through six IR levels to CUDA kernels"};
  app.require_subcommand(1);
  app.set_version_flag("--version", [] {
    return fmt::format("kiln {} (commit {})\nLibTorch {}\n{}\nmanifest format {}", KILN_VERSION, KILN_GIT_COMMIT,
                       kiln::frontend::libtorchVersion(), kiln::runtime::cudaVersions(),
                       kiln::runtime::kManifestFormatVersion);
  });

  kiln::CompileCommand compile;
  PipelineFlags flags;  // shared by compile and run (only one is parsed)
  auto* c = app.add_subcommand("compile", "compile a model and print one IR level, or emit CUDA artifacts");
  std::string compileExpression, runExpression;  // -c EXPR
  c->add_option("model", compile.model, "TorchScript model (.pt)");
  c->add_option("-c", compileExpression,
                "instead of a model: a PyTorch call to trace and compile, e.g. \"torch.nn.RMSNorm(2048)(torch.randn(1, 32, "
                "2048))\" (traced by python3 with torch; its tensor arguments become the inputs x0, x1, ...)")
      ->type_name("EXPR");
  c->add_option("--ir", compile.ir, "level to print: torch, tensor, loop, tile, kernel, cuda (default loop)");
  c->add_flag("--json", compile.json, "print the level as JSON");
  c->add_option("--emit", compile.emit, "write artifacts: 'cuda' (.cu, cubins, manifest.json, weights.bin) into -o DIR");
  c->add_option("-o,--output", compile.output, "output file (--ir) or directory (--emit)");
  c->add_option("--input", compile.inputs, "override an input: NAME=1x32x2048[:f32] (repeatable)");
  c->add_option("--arch", compile.arch, "target GPU: " + kiln::knownArchList() + " (default " + kiln::kDefaultArch + ")");
  c->add_flag("--no-nvcc", compile.noCompile, "with --emit: skip compiling cubins");
  c->add_flag("--explain-schedule", compile.explainSchedule, "for every kernel, its GPU schedule on one line; for matrix products, the tile the model chose, its prediction and the runners-up");
  c->add_flag("--explain-memory", compile.explainMemory, "the arena plan: its size, the weights, inputs and outputs, and every temporary's bytes, offset and the kernels it lives across (temporaries whose lives do not overlap share bytes)");
  c->add_flag("--explain-fusion", compile.explainFusion, "for every Loop-IR kernel, the Torch ops it holds; for every producer left unfused, the rule that refused it");
  c->add_option("--dtype", compile.dtype, "cast the model's floating-point weights and inputs: f16 or bf16");
  c->add_option("--prefill-chunk", compile.prefillChunk,
                "with --emit cuda and a decoder-step trace: write the decode step (manifest.json) and a prefill chunk of C "
                "tokens (manifest.prefill.json) into -o DIR, sharing weights.bin (docs/decode.md)")
      ->type_name("C");
  c->add_option("--token-input", compile.tokenInput, "with --prefill-chunk: the argument taking token ids (default: the first)")->type_name("NAME");
  c->add_option("--position-input", compile.positionInput, "with --prefill-chunk: the argument taking their positions (default: the second)")->type_name("NAME");
  addPipelineFlags(c, compile.pipeline, flags);

  kiln::RunCommand run;
  auto* r = app.add_subcommand("run", "run a model on seeded random inputs or --inputs DIR (GPU, or --interpret on the CPU)");
  r->add_option("model", run.model, "TorchScript model (.pt), or a directory written by kiln compile --emit cuda");
  r->add_option("-c", runExpression, "instead of a model: a PyTorch call to trace and run, as kiln compile -c")->type_name("EXPR");
  r->add_option("--save-io", run.saveIo, "write the inputs and outputs as raw bytes (input0.bin, output0.bin, ...) into DIR, new or empty")->type_name("DIR");
  r->add_option("--reference", run.reference, "with a directory: the TorchScript model --check compares with")->type_name("MODEL.pt");
  r->add_flag("--json", run.json, "print one JSON object: the run, each output (and its check), timings, the other lines as messages");
  r->add_option("--entry", run.entry, "with a directory: run its entry point NAME (manifest.NAME.json, e.g. prefill) instead of manifest.json")->type_name("NAME");
  r->add_flag("--check", run.check, "compare with LibTorch running the same module on the same device");
  r->add_flag("--interpret", run.interpret, "run the Kernel IR in the CPU interpreter instead of on a GPU");
  r->add_flag("--bisect", run.bisect, "with --check: the first kernel whose output differs from LibTorch's value of the "
                                      "same TorchScript value, and by how much (-v: every comparison)");
  r->add_option("--seed", run.seed, "seed of the random inputs (default 0)");
  r->add_option("--inputs", run.inputsDir,
                "read the inputs from DIR (input0.bin, input1.bin, ...: raw bytes in the model's shapes and dtypes, as --save-io "
                "writes them) instead of seeded random ones")
      ->type_name("DIR");
  r->add_option("--input", run.inputs, "override an input: NAME=1x32x2048[:f32] (repeatable)");
  r->add_option("--arch", run.arch, "target GPU: " + kiln::knownArchList() + " (default " + kiln::kDefaultArch + ")");
  r->add_option("--bench", run.benchIters, "also time N forward passes on the GPU");
  r->add_flag("--graph", run.benchGraph, "with --bench: replay the forward from one CUDA graph (the default)");
  r->add_flag("--no-graph", run.benchNoGraph, "with --bench: launch the kernels one by one instead of replaying a CUDA graph; -v prints both figures");
  r->add_option("--rotate-mb", run.benchRotateMb, "with --bench: cycle over copies of the whole arena (weights too) touching at least this many MB, so no forward finds its data in L2");
  r->add_flag("--profile", run.profile, "with --bench N: also time each kernel alone (N launches) and list the kernels by GPU time per forward");
  r->add_option("--dtype", run.dtype, "cast the model's floating-point weights and inputs: f16 or bf16");
  addPipelineFlags(r, run.pipeline, flags);

  kiln::TuneCommand tune;
  std::string tuneExpression;
  CLI::App* t = addTuneCommand(app, tune, tuneExpression, flags);

  kiln::GenerateCommand generate;
  PipelineFlags generatePasses;
  CLI::App* gen = addGenerateCommand(app, generate, generatePasses);

  kiln::InspectCommand inspect;
  auto* in = app.add_subcommand("inspect", "list a model's inputs, parameters and ops (and those kiln does not support); needs no shapes");
  in->add_option("model", inspect.model, "TorchScript model (.pt)")->required();
  in->add_flag("--json", inspect.json, "print the same facts as one JSON object");

  kiln::OptCommand opt;
  bool optPrintAfterAll = false, optNoVerify = false;
  CLI::App* o = addOptCommand(app, opt, optPrintAfterAll, optNoVerify);

  auto* passes = app.add_subcommand("passes", "list every pass");
  auto* ops = app.add_subcommand("ops", "list the supported aten ops");
  bool opsMarkdown = false;
  ops->add_flag("--markdown", opsMarkdown, "each op with what kiln computes and refuses, as docs/ops.md lists them");

  try {
    checkCommandName(app, argc, argv);
  } catch (const kiln::UsageError& e) {
    std::cerr << "kiln: error: " << kiln::printable(e.what()) << "\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "kiln: error: " << kiln::printable(e.what()) << " (see kiln --help)\n";
    return 2;
  }

  try {
    if (passes->parsed()) return listPasses();
    if (ops->parsed()) return listOps(opsMarkdown);
    if (in->parsed()) return kiln::runInspect(inspect, std::cout);
    if (t->parsed()) {
      finishPipelineFlags(tune.pipeline, flags);
      const auto traced = modelOrExpression(*t, tune.model, tuneExpression);
      return kiln::runTune(tune, std::cout);
    }
    if (gen->parsed()) return runGenerateCommand(generate, generatePasses);
    if (o->parsed()) {
      if (optPrintAfterAll) opt.pipeline.verbosity = std::max(opt.pipeline.verbosity, 2);
      opt.pipeline.verify = !optNoVerify;
      return kiln::runOpt(opt, std::cout);
    }
    if (c->parsed()) {
      checkCompileOutputs(*c, compile);
      finishPipelineFlags(compile.pipeline, flags);
      const auto traced = modelOrExpression(*c, compile.model, compileExpression);
      return kiln::runCompile(compile, std::cout);
    }
    finishPipelineFlags(run.pipeline, flags);
    const auto traced = modelOrExpression(*r, run.model, runExpression);
    return kiln::runRun(run, std::cout);
  } catch (const kiln::UsageError& e) {  // one line: a newline or escape in an argument or a file's name is shown as \xHH
    std::cerr << "kiln: error: " << kiln::printable(e.what()) << "\n";
    return 2;
  } catch (const kiln::UserError& e) {
    std::cerr << "kiln: error: " << kiln::printable(e.what()) << "\n";
    return 1;
  } catch (const kiln::StopRequested& s) {
    std::cout << s.irText;
    return 0;
  } catch (const kiln::InternalError& e) {
    std::cerr << "kiln: " << e.what() << "\n";
    return 3;
  } catch (const std::bad_alloc&) {
    std::cerr << "kiln: error: out of host memory (the model, its inputs or the CPU interpreter's buffers do not fit in this "
                 "machine's memory); try smaller --input shapes\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kiln: internal error: " << kiln::printable(e.what()) << "\n";
    return 3;
  }
}
