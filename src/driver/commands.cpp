#include "kiln/driver/commands.h"

#include "bisect.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kiln/cuda/emitter.h"
#include "kiln/cuda/memory_plan.h"
#include "kiln/driver/generate.h"
#include "kiln/driver/kernel_profile.h"
#include "kiln/driver/pipeline.h"
#include "kiln/driver/run_cache.h"
#include "kiln/runtime/runtime.h"
#include "kiln/support/nearest.h"
#include "kiln/support/error.h"
#include "kiln/support/hash.h"
#include "kiln/support/output.h"

namespace kiln {
namespace fs = std::filesystem;
using json = nlohmann::json;

void checkPassName(const std::string& name) {
  if (findPass(name)) return;
  std::vector<std::string> names;
  for (auto& p : allPasses()) names.push_back(p.name);
  usageError("unknown pass '{}'; the nearest: {} (`kiln passes` lists them all)", printable(name),
             fmt::join(nearestNames(name, names, 3), ", "));
}

void checkLevelName(const std::string& level) {
  const auto& levels = allLevels();
  if (std::find(levels.begin(), levels.end(), level) == levels.end())
    usageError("unknown IR level '{}'; choose one of: {}", level, fmt::join(levels, ", "));
}

// A bad --arch is a bad option (exit code 2), found before any work; it never reaches nvcc.
const Target& checkArch(const std::string& arch) {
  try {
    return targetFor(arch);
  } catch (const UsageError&) {
    throw;
  } catch (const UserError& e) {
    throw UsageError(e.what());
  }
}

std::optional<DType> parseCast(const std::string& text) {
  if (text.empty()) return std::nullopt;
  auto t = parseDType(text);
  if (!t || (*t != DType::F32 && *t != DType::F16 && *t != DType::BF16))
    usageError("--dtype must be f32, f16 or bf16, not '{}'", text);
  return t;
}

std::vector<frontend::InputOverride> parseInputs(const std::vector<std::string>& texts) {
  std::vector<frontend::InputOverride> out;
  for (auto& t : texts) {
    out.push_back(frontend::parseInputOverride(t));
    for (size_t i = 0; i + 1 < out.size(); ++i)
      if (out[i].name == out.back().name)
        usageError("--input {} is given twice ({} and {}); give each input once", out.back().name, texts[i], t);
  }
  return out;
}

namespace {

// -o naming the model being compiled would replace it with the IR text: refused before any work.
void checkOutputIsNotTheModel(const std::string& output, const std::string& model) {
  std::error_code ec;
  if (!output.empty() && fs::exists(output, ec) && fs::equivalent(output, model, ec))
    usageError("-o {} names the model being compiled; write the output to another file", output);
}

// What `kiln run` needs to know of a compiled model, from a fresh compile or from a cached manifest.
struct RunPlan {
  std::string name;
  size_t kernels = 0;
  std::vector<std::pair<DType, Shape>> inputs, outputs;
  std::vector<DType> storedTypes;  // dtypes of the inputs and weights
};

RunPlan planOf(const kernel::Program& kp) {
  RunPlan p{kp.modelName, kp.kernels.size(), {}, {}, {}};
  for (int i : kp.inputs) p.inputs.emplace_back(kp.buffers[i].dtype, kp.buffers[i].shape);
  for (int i : kp.outputs) p.outputs.emplace_back(kp.buffers[i].dtype, kp.buffers[i].shape);
  for (auto& b : kp.buffers)
    if (b.kind == loop::Buffer::Kind::Input || b.kind == loop::Buffer::Kind::Weight) p.storedTypes.push_back(b.dtype);
  return p;
}

RunPlan planOf(const runtime::Manifest& m) {
  RunPlan p{m.model, m.kernels.size(), {}, {}, {}};
  for (int64_t id : m.inputs) p.inputs.emplace_back(m.findBuffer(id)->dtype, m.findBuffer(id)->shape);
  for (int64_t id : m.outputs) p.outputs.emplace_back(m.findBuffer(id)->dtype, m.findBuffer(id)->shape);
  for (auto& b : m.buffers)
    if (b.kind == runtime::BufferKind::Input || b.kind == runtime::BufferKind::Weight) p.storedTypes.push_back(b.dtype);
  return p;
}

// For a check: results are compared at the tolerance of the lowest precision the model computes in (an f32
// output of a bf16 model carries bf16 rounding from inside).
DType checkType(const RunPlan& plan, DType out) {
  if (out == DType::I64 || out == DType::Bool) return out;  // exact whatever the model computes in
  DType t = out;
  for (DType d : plan.storedTypes)
    if ((d == DType::F16 || d == DType::BF16) && tolerance(d) > tolerance(t)) t = d;
  return t;
}

// Debugging flags ask to watch the compiler work, so `kiln run` compiles (and refreshes the cache) with them.
bool wantsToWatchCompile(const PipelineOptions& o) {
  return o.verbosity > 0 || !o.printAfter.empty() || !o.dumpDir.empty() || o.timePasses || o.stopAfter;
}

// `kiln compile STEP.pt --emit cuda -o DIR --prefill-chunk C`: the decode step and a prefill chunk of C tokens, two
// compilations of one decoder-step trace, into one directory (cuda::writeArtifacts' entries).
int emitDecodeEntries(const CompileCommand& c, const Target& target, std::ostream& out) {
  if (c.emit != "cuda") usageError("--prefill-chunk writes entry points into -o DIR: give --emit cuda");
  if (c.prefillChunk < 2) usageError("--prefill-chunk must be a number of tokens of at least 2, not {}", c.prefillChunk);
  if (!c.inputs.empty()) usageError("--prefill-chunk sets the shapes of both entries itself; drop --input");
  const auto [tokenName, positionName] = decodeInputNames(c.model, c.tokenInput, c.positionInput);
  auto specialised = [&](int64_t tokens, const std::string& level) {
    std::vector<frontend::InputOverride> inputs;
    for (const std::string& o : decodeEntryInputs(tokenName, positionName, tokens)) inputs.push_back(frontend::parseInputOverride(o));
    return compileModel(c.model, inputs, c.pipeline, level, parseCast(c.dtype), target);
  };
  Compiled step = specialised(1, "cuda");
  const DecodeInterface iface = describeDecode(step.torchIR, tokenName, positionName);  // a decoder step, or one line
  if (iface.capacity > 0 && c.prefillChunk > iface.capacity)
    userError("--prefill-chunk {}: the cache of {} holds {} positions; a chunk must fit it", c.prefillChunk, c.model, iface.capacity);
  Compiled chunk = specialised(c.prefillChunk, "kernel");
  for (kernel::Kernel& k : chunk.kernelIR.kernels) k.name = "prefill_" + k.name;
  const cuda::Module chunkModule = cuda::emit(chunk.kernelIR);
  cuda::writeArtifacts({artifactEntry("", step, step.cudaIR, iface), artifactEntry("prefill", chunk, chunkModule, iface)},
                       c.output, cuda::ArtifactOptions{target.arch, !c.noCompile});
  out << fmt::format("kiln: wrote {} to {}: the decode step ({} kernels, {}) and a prefill chunk of {} tokens ({} kernels, {}), "
                     "one {}\n", step.cudaIR.modelName, c.output, step.cudaIR.sources.size(), runtime::kManifestFileName,
                     c.prefillChunk, chunkModule.sources.size(), runtime::manifestFileName("prefill"), "weights.bin");
  return 0;
}

}  // namespace

int runCompile(const CompileCommand& c, std::ostream& out) {
  const Target& target = checkArch(c.arch);
  checkLevelName(c.ir);
  if (!c.emit.empty() && c.emit != "cuda") usageError("--emit supports 'cuda', not '{}'", c.emit);
  if (!c.emit.empty() && c.output.empty()) usageError("--emit cuda needs -o DIR");
  checkOutputIsNotTheModel(c.output, c.model);
  if (c.prefillChunk != 0) return emitDecodeEntries(c, target, out);
  if (!c.tokenInput.empty() || !c.positionInput.empty())
    usageError("--token-input and --position-input name a decoder step's inputs for --prefill-chunk; give it too");
  auto inputs = parseInputs(c.inputs);
  std::string until = c.emit.empty() ? c.ir : "cuda";
  Compiled compiled;
  try {
    const std::string level = !c.emit.empty()      ? until
                              : c.explainFusion   ? "loop"
                              : c.explainSchedule ? "tile"
                              : c.explainMemory   ? "kernel"
                                                  : until;
    compiled = compileModel(c.model, inputs, c.pipeline, level, parseCast(c.dtype), target);
  } catch (const StopRequested& stop) {
    if (c.output.empty() || !c.emit.empty()) out << stop.irText;
    else writeOutputFile(c.output, stop.irText);
    return 0;
  }
  if ((c.explainFusion || c.explainSchedule || c.explainMemory) && c.emit.empty()) {
    std::string text = c.explainFusion     ? loop::explainFusion(compiled.loopIR)
                       : c.explainSchedule ? tile::explainSchedules(compiled.tileIR)
                                           : cuda::explainMemory(compiled.kernelIR);
    if (c.output.empty()) out << text;
    else writeOutputFile(c.output, text);
    return 0;
  }
  if (!c.emit.empty()) {
    const std::optional<DecodeInterface> decode = findDecode(compiled.torchIR);
    cuda::writeArtifacts({artifactEntry("", compiled, compiled.cudaIR, decode)}, c.output,
                         cuda::ArtifactOptions{target.arch, !c.noCompile});
    out << fmt::format("kiln: wrote {} kernels of {} to {}{}\n", compiled.cudaIR.sources.size(), compiled.cudaIR.modelName,
                       c.output, decode ? " (a decoder step: kiln generate runs it)" : "");
    return 0;
  }
  std::string text = printLevel(compiled, c.ir, c.json);
  if (c.output.empty()) out << text;
  else writeOutputFile(c.output, text);
  return 0;
}

namespace {

// FNV-1a over an output's bytes: a fingerprint two runs share only when every byte agrees (any FNV-1a tool gives it).
uint64_t fingerprint(const std::vector<std::byte>& bytes) { return fnv1a(kFnvOffsetBasis, bytes.data(), bytes.size()); }

void checkSaveIoDir(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !(fs::is_directory(dir, ec) && fs::is_empty(dir, ec)))
    userError("--save-io {}: not a new or empty directory; name one that is", dir);
}

// --save-io DIR: the bytes of every input and output in the model's dtypes, to feed the same inputs to another run
// (examples/run_emitted) or compare outputs bit for bit. DIR must be new or empty: nothing of the user's is replaced.
void saveInputsAndOutputs(const std::string& dir, const std::vector<HostTensor>& inputs,
                          const std::vector<HostTensor>& outputs, std::ostream& out) {
  std::error_code ec;
  checkSaveIoDir(dir);
  fs::create_directories(dir, ec);
  if (ec) userError("--save-io {}: cannot create the directory: {}", dir, ec.message());
  auto write = [&](const std::string& name, const HostTensor& t) {
    std::vector<std::byte> bytes = toBytes(t);
    std::ofstream f(fs::path(dir) / name, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!f) userError("--save-io {}: cannot write {}", dir, name);
  };
  for (size_t i = 0; i < inputs.size(); ++i) write(fmt::format("input{}.bin", i), inputs[i]);
  for (size_t i = 0; i < outputs.size(); ++i) write(fmt::format("output{}.bin", i), outputs[i]);
  out << fmt::format("kiln: wrote {} inputs and {} outputs to {}\n", inputs.size(), outputs.size(), dir);
}

// Combinations of --bench, --profile, --interpret and --save-io that cannot work, refused before any work.
void checkRunOptions(const RunCommand& c) {
  if (c.benchIters < 0) usageError("--bench needs a positive number of forwards, not {}", c.benchIters);
  if (c.benchRotateMb < 0) usageError("--rotate-mb needs a size in MB >= 0, not {}", c.benchRotateMb);
  if ((c.benchGraph || c.benchNoGraph || c.benchRotateMb > 0) && c.benchIters == 0)
    usageError("--graph, --no-graph and --rotate-mb time forwards: add --bench N");
  if (c.benchGraph && c.benchNoGraph) usageError("--graph and --no-graph contradict each other: give one");
  if (c.profile && c.benchIters == 0) usageError("--profile times each kernel N times: add --bench N");
  if (c.benchIters > 0 && c.interpret) usageError("--bench times the GPU; it cannot be combined with --interpret");
  if (c.bisect && !c.check) usageError("--bisect looks for where a check fails: add --check");
  if (c.bisect && fs::is_directory(c.model))
    usageError("--bisect compiles the model to know which value each kernel output holds: run the .pt, not the emitted "
               "directory {}", c.model);
  if (!c.saveIo.empty()) checkSaveIoDir(c.saveIo);  // before any work, and again when writing
  std::error_code ec;
  if (!c.inputsDir.empty() && !fs::is_directory(c.inputsDir, ec))
    usageError("--inputs {}: not a directory; name the directory --save-io wrote (input0.bin, input1.bin, ...)", c.inputsDir);
}

// `kiln run DIR`: an emitted directory runs as compiled (its shapes, dtype and schedules are fixed); --check
// compares it with LibTorch running --reference. Whether the model is such a directory, with the options that cannot
// apply to one refused.
bool checkEmittedDirectory(const RunCommand& c) {
  std::error_code ec;
  const bool emitted = fs::is_directory(c.model, ec);
  if (emitted) {
    const std::string manifest = runtime::manifestFileName(c.entry);
    if (!c.entry.empty() && !fs::exists(fs::path(c.model) / manifest, ec))
      userError("{} has no entry point '{}' ({}): kiln compile --emit cuda --prefill-chunk C writes the entry 'prefill'",
                c.model, c.entry, manifest);
    if (!fs::exists(fs::path(c.model) / manifest, ec))
      userError("{} is a directory without {}: kiln run takes a .pt or a directory written by kiln compile --emit cuda",
                c.model, manifest);
    if (c.interpret) usageError("--interpret runs Kernel IR, which an emitted directory does not hold: run the .pt");
    if (!c.inputs.empty() || !c.pipeline.enable.empty() || !c.pipeline.disable.empty())
      usageError("{} was compiled for fixed input shapes and passes: compile the .pt again to change them", c.model);
    if (c.check && c.reference.empty())
      usageError("--check on an emitted directory needs the model to compare with: add --reference MODEL.pt");
  } else if (!c.reference.empty()) {
    usageError("--reference names the model an emitted directory is checked against; {} is not a directory", c.model);
  } else if (!c.entry.empty()) {
    usageError("--entry names an entry point of an emitted directory; {} is not a directory", c.model);
  }
  return emitted;
}

// How to compile the model for `kiln run`: its input shapes, the dtype it is cast to, the Target.
struct RunCompile {
  std::vector<frontend::InputOverride> inputs;
  std::optional<DType> cast;
  const Target& target;
};

// What one run made: the model's plan, the device it ran on, its inputs and outputs, and the GPU model when --profile
// still needs it (it runs last, after the check is reported).
struct RunOutcome {
  RunPlan plan;
  std::string device;
  std::vector<HostTensor> args, results;
  std::unique_ptr<runtime::Model> gpuModel;
  // --bisect: the interpreted program and the values its kernels left in buffers holding TorchScript values.
  std::optional<kernel::Program> kernelIR;
  KeptValues kept;
};

std::vector<HostTensor> randomInputs(const RunPlan& plan, uint64_t seed) {
  std::vector<HostTensor> args;
  for (size_t i = 0; i < plan.inputs.size(); ++i)
    args.push_back(randomTensor(plan.inputs[i].first, plan.inputs[i].second, seed * 7919 + i));
  return args;
}

// --inputs DIR: input0.bin, input1.bin, ... as --save-io writes them, each exactly its input's bytes, and no more files
// of that name than the model has inputs (a directory saved from another model is refused, not half used).
std::vector<HostTensor> inputsFromDirectory(const RunPlan& plan, const std::string& dir) {
  std::vector<HostTensor> args;
  for (size_t i = 0; i < plan.inputs.size(); ++i) {
    const auto& [dtype, shape] = plan.inputs[i];
    const int64_t want = numel(shape) * dtypeBytes(dtype);
    const fs::path file = fs::path(dir) / fmt::format("input{}.bin", i);
    std::error_code ec;
    if (!fs::is_regular_file(file, ec))
      userError("--inputs {}: no input{}.bin for input {} ({}[{}], {} bytes); the directory --save-io wrote holds one per input",
                dir, i, i, dtypeName(dtype), shapeString(shape), want);
    const auto size = static_cast<int64_t>(fs::file_size(file, ec));
    if (ec || size != want)
      userError("--inputs {}: input{}.bin holds {} bytes, but input {} is {}[{}], {} bytes; save the inputs of this model at "
                "these shapes and dtypes (--save-io, --input, --dtype)", dir, i, size, i, dtypeName(dtype), shapeString(shape),
                want);
    std::vector<std::byte> bytes(static_cast<size_t>(want));
    std::ifstream f(file, std::ios::binary);
    f.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!f) userError("--inputs {}: cannot read input{}.bin", dir, i);
    args.push_back(fromBytes(dtype, shape, bytes));
  }
  std::error_code ec;
  if (fs::exists(fs::path(dir) / fmt::format("input{}.bin", plan.inputs.size()), ec))
    userError("--inputs {}: holds input{}.bin, but {} takes {} input(s): the files are another model's", dir, plan.inputs.size(),
              plan.name, plan.inputs.size());
  return args;
}

// The inputs of a run: read from --inputs DIR, or seeded random ones.
std::vector<HostTensor> runInputs(const RunCommand& c, const RunPlan& plan) {
  return c.inputsDir.empty() ? randomInputs(plan, c.seed) : inputsFromDirectory(plan, c.inputsDir);
}

RunOutcome runInInterpreter(const RunCommand& c, const RunCompile& how, std::ostream& out) {
  RunOutcome run;
  Compiled compiled = compileModel(c.model, how.inputs, c.pipeline, "cuda", how.cast, how.target);
  if (c.bisect) refuseStateForBisect(compiled.kernelIR, c.model);
  run.plan = planOf(compiled.kernelIR);
  run.args = runInputs(c, run.plan);
  const TracedValueKeeper keeper(compiled.kernelIR, c.bisect ? &run.kept : nullptr, out);
  run.results = kernel::interpret(compiled.kernelIR, run.args, nullptr, keeper.interpreterHook());
  run.device = "CPU (Kernel-IR interpreter)";
  if (c.bisect) run.kernelIR = std::move(compiled.kernelIR);
  return run;
}

// The directory of cubins to run: the emitted one, or the run cache's entry for these options, compiled into it when
// it is missing or damaged or when debugging flags ask to watch the compiler.
fs::path kernelDirectory(const RunCommand& c, bool emitted, const RunCompile& how, std::ostream& out) {
  const std::vector<std::string> passChoices = passChoicesOf(c.pipeline);
  std::string shapes;  // the table's contents: another table is another compilation
  if (!c.pipeline.productShapes.empty()) {
    std::ifstream in(c.pipeline.productShapes);
    std::stringstream text;
    text << in.rdbuf();
    shapes = text.str();
  }
  fs::path dir = emitted ? fs::path(c.model)
                         : runCacheDir(RunCacheKey{c.model, c.inputs, c.dtype, how.target.arch, passChoices, shapes});
  std::optional<CacheEntryLock> lock;  // held until the entry is checked or written: one compile per entry at a time
  if (!emitted) lock.emplace(dir, out);
  if (emitted) {
    out << fmt::format("kiln: compiled nothing: running the emitted directory {}\n", dir.string());
  } else if (std::string damage; usableCacheEntry(dir, &damage) && !wantsToWatchCompile(c.pipeline)) {
    out << fmt::format("kiln: compiled nothing: kernels from the cache {}\n", dir.string());
  } else {
    if (!damage.empty()) out << fmt::format("kiln: the cache entry is damaged ({}); compiling it again\n", damage);
    auto start = std::chrono::steady_clock::now();
    Compiled compiled = compileModel(c.model, how.inputs, c.pipeline, "cuda", how.cast, how.target);
    cuda::writeArtifacts({artifactEntry("", compiled, compiled.cudaIR, std::nullopt)}, dir,
                         cuda::ArtifactOptions{how.target.arch, true});
    out << fmt::format("kiln: compiled {} kernels in {:.1f} s into the cache {}\n", compiled.kernelIR.kernels.size(),
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), dir.string());
  }
  return dir;
}

// --bench N: the headline figure first (graph replay unless --no-graph); with -v the other mode and the runtime's
// forward() too.
void benchmark(runtime::Model& model, const RunCommand& c, const RunPlan& plan, std::ostream& out, json& report) {
  std::vector<bool> modes{!c.benchNoGraph};
  if (c.pipeline.verbosity > 0) modes.push_back(c.benchNoGraph);
  report["bench"] = json::array();
  for (bool graph : modes) {
    runtime::Timing t = model.time(runtime::TimingOptions{3, c.benchIters, graph,
                                                          static_cast<int64_t>(c.benchRotateMb * 1e6)});
    report["bench"].push_back({{"ms_per_forward", t.msPerForward}, {"forwards", t.forwards}, {"graph", t.graph},
                               {"forwards_per_graph", t.forwardsPerGraph}, {"arena_copies", t.sets},
                               {"rotated_bytes", t.rotatedBytes}});
    std::string how = t.graph ? fmt::format("replayed from one CUDA graph of {} forwards", t.forwardsPerGraph)
                              : "launched back to back";
    if (t.sets > 1) how += fmt::format(", rotating over {} copies of the weights and the arena ({:.0f} MB)", t.sets, t.rotatedBytes / 1e6);
    out << fmt::format("kiln: {} kernels, {:.5f} ms per forward (CUDA events around {} forwards {}, after warm-up)\n",
                       plan.kernels, t.msPerForward, t.forwards, how);
  }
  if (c.pipeline.verbosity > 0) {
    const double ms = model.timeForward(c.benchIters);
    report["forward_ms"] = ms;
    out << fmt::format("kiln: {:.5f} ms per forward through the runtime's forward() (graph replay, device inputs "
                       "and outputs bound in place, CUDA events around {} calls)\n", ms, c.benchIters);
  }
}

RunOutcome runOnGpu(const RunCommand& c, bool emitted, const RunCompile& how, std::ostream& out, json& report) {
  std::string why;
  if (!runtime::gpuAvailable(&why)) {
    if (emitted) userError("kiln run needs a CUDA GPU to run an emitted directory: {}", why);
    userError("kiln run needs a CUDA GPU: {}; use --interpret to run the kernels in the CPU interpreter", why);
  }
  fs::path dir = kernelDirectory(c, emitted, how, out);
  RunOutcome run;
  // A cache entry was verified by usableCacheEntry or has just been written; an emitted directory is checked on load.
  run.gpuModel = std::make_unique<runtime::Model>(dir, /*filesChecked=*/!emitted, emitted ? c.entry : "");
  runtime::Model& model = *run.gpuModel;
  run.plan = planOf(model.manifest());
  run.args = runInputs(c, run.plan);
  run.device = model.deviceName();
  std::vector<std::vector<std::byte>> bytes;
  for (auto& a : run.args) bytes.push_back(toBytes(a));
  std::optional<TracedValueKeeper> keeper;
  if (c.bisect) {  // kernel by kernel, each one's outputs read back from the arena before a later kernel reuses it
    // The cache entry records no IR: compiled again in process, and checked to be the entry's.
    run.kernelIR = std::move(compileModel(c.model, how.inputs, c.pipeline, "cuda", how.cast, how.target).kernelIR);
    checkBisectMatchesManifest(*run.kernelIR, model.manifest(), c.model);
    keeper.emplace(*run.kernelIR, &run.kept, out);
  }
  auto outs = model.run(bytes, keeper ? keeper->gpuHook(model) : std::function<void(size_t)>{});
  for (size_t i = 0; i < outs.size(); ++i)
    run.results.push_back(fromBytes(run.plan.outputs[i].first, run.plan.outputs[i].second, outs[i]));
  if (c.benchIters > 0) benchmark(model, c, run.plan, out, report);
  if (!c.profile) run.gpuModel.reset();  // free the device before LibTorch's reference run, as without --profile always
  return run;
}

// Each output's dtype, shape, sum and fingerprint (printed without --check).
json outputFacts(const std::vector<HostTensor>& results) {
  json facts = json::array();
  for (const HostTensor& r : results) {
    double sum = 0;
    for (float v : r.values) sum += v;
    facts.push_back({{"dtype", dtypeName(r.dtype)}, {"shape", r.shape}, {"sum", sum},
                     {"fnv1a", fmt::format("{:016x}", fingerprint(toBytes(r)))}});
  }
  return facts;
}

void printOutputs(const json& facts, std::ostream& out) {
  for (size_t i = 0; i < facts.size(); ++i)
    out << fmt::format("  output {}: {}[{}] sum {:.6g} fnv1a {}\n", i, facts[i]["dtype"].get<std::string>(),
                       shapeString(facts[i]["shape"].get<Shape>()), facts[i]["sum"].get<double>(),
                       facts[i]["fnv1a"].get<std::string>());
}

// LibTorch's outputs for the same inputs, on the GPU when kiln ran there (`onGpu` false when it fell back to the CPU).
std::vector<HostTensor> referenceOutputs(const RunCommand& c, const std::string& referenceModel,
                                         const std::vector<HostTensor>& args, std::optional<DType> cast, bool& onGpu,
                                         std::ostream& out) {
  onGpu = !c.interpret;
  try {
    return frontend::runReference(referenceModel, args, onGpu, cast);
  } catch (const UserError& e) {
    if (c.interpret) throw;
    // A trace that pins tensors to the CPU (transformers builds its masks with a traced device) cannot run
    // on the GPU; compare with its CPU run instead, and say so.
    out << fmt::format("kiln: {}; comparing with LibTorch on the CPU instead (trace the model on the GPU to compare there)\n", e.what());
    onGpu = false;
    return frontend::runReference(referenceModel, args, false, cast);
  }
}

// bf16/f16 models: kiln and LibTorch are each judged against an f32 evaluation of the same rounded weights and inputs
// (DESIGN.md §4). Empty for an f32 model, or when the trace cannot run in f32 (casts it pins clash with f32 weights):
// then the direct comparison at the dtype's tolerance decides, and the output says so.
std::vector<HostTensor> f32Evaluation(const RunPlan& plan, const std::string& referenceModel,
                                      const std::vector<HostTensor>& args, const std::vector<HostTensor>& ref,
                                      bool referenceOnGpu, std::optional<DType> cast, std::ostream& out) {
  bool lowPrecision = false;
  for (size_t i = 0; i < ref.size(); ++i) {
    const DType t = checkType(plan, ref[i].dtype);
    lowPrecision = lowPrecision || t == DType::BF16 || t == DType::F16;
  }
  std::vector<HostTensor> f32;
  if (!lowPrecision) return f32;
  std::string f32Problem;
  try {
    f32 = frontend::runReference(referenceModel, args, referenceOnGpu, cast, /*inF32=*/true);
    if (f32.size() != ref.size()) f32Problem = fmt::format("it returns {} outputs, not {}", f32.size(), ref.size());
  } catch (const UserError& e) {
    f32Problem = e.what();
  }
  if (!f32Problem.empty()) {
    f32.clear();
    out << fmt::format("kiln: no f32 evaluation of {} to judge bf16/f16 results against ({}); comparing kiln with LibTorch "
                       "directly at the dtype's tolerance\n", plan.name, f32Problem);
  }
  return f32;
}

// Each output judged against LibTorch's (and the f32 evaluation's, where there is one); true when all pass.
bool compareOutputs(const RunPlan& plan, const std::vector<HostTensor>& results, const std::vector<HostTensor>& ref,
                    const std::vector<HostTensor>& f32, std::ostream& out, json& checked) {
  bool ok = true;
  for (size_t i = 0; i < results.size(); ++i) {
    Comparison cmp = compare(results[i], ref[i]);
    DType ct = checkType(plan, ref[i].dtype);
    json& o = checked.emplace_back(json{{"rel_l2", cmp.relL2}, {"max_abs", cmp.maxAbs}, {"non_finite_mismatches", cmp.nonFiniteMismatches},
                                        {"shape_mismatch", cmp.shapeMismatch}, {"checked_as", dtypeName(ct)}});
    const std::string bad = cmp.nonFiniteMismatches > 0
                                ? fmt::format(" NaN/Inf at {} positions where LibTorch has another value", cmp.nonFiniteMismatches)
                            : cmp.shapeMismatch ? " shape mismatch"
                                                : "";
    if ((ct == DType::BF16 || ct == DType::F16) && !f32.empty()) {
      Comparison kilnErr = compare(results[i], f32[i]), torchErr = compare(ref[i], f32[i]);
      bool pass = passesAgainstF32(kilnErr, torchErr);
      ok = ok && pass;
      o["against_f32"] = {{"kiln_rel_l2", kilnErr.relL2}, {"libtorch_rel_l2", torchErr.relL2},
                          {"bound", kLowPrecisionErrorRatio * torchErr.relL2 + kLowPrecisionErrorSlack}};
      o["passed"] = pass;
      out << fmt::format("  output {}: {}[{}] against f32: kiln rel_l2 {:.3e}, LibTorch {} {:.3e} (kiln may reach {:.3e}); "
                         "kiln vs LibTorch rel_l2 {:.3e}{} {}\n", i, dtypeName(ref[i].dtype), shapeString(ref[i].shape),
                         kilnErr.relL2, dtypeName(ct), torchErr.relL2,
                         kLowPrecisionErrorRatio * torchErr.relL2 + kLowPrecisionErrorSlack, cmp.relL2, bad,
                         pass ? "PASS" : "FAIL");
      continue;
    }
    bool pass = passes(cmp, ct);
    ok = ok && pass;
    o["tolerance"] = tolerance(ct);
    o["passed"] = pass;
    out << fmt::format("  output {}: {}[{}] rel_l2 {:.3e} max_abs {:.3e} (tolerance {:.0e}){} {}\n", i,
                       dtypeName(ref[i].dtype), shapeString(ref[i].shape), cmp.relL2, cmp.maxAbs, tolerance(ct), bad,
                       pass ? "PASS" : "FAIL");
  }
  return ok;
}


int runAndReport(const RunCommand& c, std::ostream& out, json& report) {
  const Target& target = checkArch(c.arch);
  checkRunOptions(c);
  const bool emitted = checkEmittedDirectory(c);
  const std::string& referenceModel = emitted ? c.reference : c.model;
  const RunCompile how{parseInputs(c.inputs), parseCast(c.dtype), target};
  RunOutcome run = c.interpret ? runInInterpreter(c, how, out) : runOnGpu(c, emitted, how, out, report);
  out << fmt::format("kiln: ran {} ({} kernels) on {}\n", printable(run.plan.name), run.plan.kernels, run.device);
  report["model"] = run.plan.name;
  report["kernels"] = run.plan.kernels;
  report["device"] = run.device;
  report["outputs"] = outputFacts(run.results);
  report["check"] = nullptr;
  if (!c.saveIo.empty()) saveInputsAndOutputs(c.saveIo, run.args, run.results, out);
  auto profile = [&] {  // each kernel alone: last, so that a failure here cannot hide the check's verdict
    if (!c.profile || !run.gpuModel) return;
    const std::vector<double> ms = run.gpuModel->timeEachKernel(c.benchIters);
    out << formatKernelProfile(run.gpuModel->manifest(), ms, c.benchIters);
    report["profile"] = json::array();
    for (size_t k = 0; k < ms.size(); ++k)
      report["profile"].push_back({{"kernel", run.gpuModel->manifest().kernels[k].name}, {"ms_per_launch", ms[k]}});
  };
  if (!c.check) {
    printOutputs(report["outputs"], out);
    profile();
    return 0;
  }
  bool referenceOnGpu = false;
  std::vector<HostTensor> ref = referenceOutputs(c, referenceModel, run.args, how.cast, referenceOnGpu, out);
  if (ref.size() != run.results.size())
    userError("LibTorch returns {} outputs, kiln {}", ref.size(), run.results.size());
  std::vector<HostTensor> f32 = f32Evaluation(run.plan, referenceModel, run.args, ref, referenceOnGpu, how.cast, out);
  report["check"] = {{"reference_on_gpu", referenceOnGpu}, {"outputs", json::array()}};
  bool ok = compareOutputs(run.plan, run.results, ref, f32, out, report["check"]["outputs"]);
  report["check"]["passed"] = ok;
  out << (ok ? "kiln: check passed against LibTorch\n" : "kiln: check FAILED against LibTorch\n");
  if (c.bisect) {
    BisectReference where{referenceModel, run.args, how.cast, std::nullopt};
    for (DType t : run.plan.storedTypes)
      if (t == DType::BF16 || t == DType::F16) where.lowPrecision = t;
    report["bisect"] = bisectKernels(*run.kernelIR, run.kept, where, ok, c.pipeline.verbosity > 0, out);
  }
  profile();
  return ok ? 0 : 1;
}

}  // namespace

// kiln run: with --json, the lines go into the report's "messages" and stdout gets the report alone.
int runRun(const RunCommand& c, std::ostream& stdoutStream) {
  std::ostringstream captured;
  std::ostream& out = c.json ? captured : stdoutStream;
  json report;
  const int rc = runAndReport(c, out, report);
  if (c.json) {
    report["messages"] = json::array();
    std::istringstream lines(captured.str());
    for (std::string line; std::getline(lines, line);) report["messages"].push_back(line);
    stdoutStream << report.dump(1) << "\n";
  }
  return rc;
}
}  // namespace kiln
