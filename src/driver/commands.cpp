#include "kiln/driver/commands.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <cstring>
#include <random>

#include "kiln/driver/pipeline.h"
#include "kiln/runtime/runtime.h"
#include "kiln/support/error.h"
#include "kiln/support/files.h"

namespace kiln {
namespace fs = std::filesystem;

void checkPassName(const std::string& name) {
  if (findPass(name)) return;
  std::vector<std::string> names;
  for (auto& p : allPasses()) names.push_back(p.name);
  usageError("unknown pass '{}'; `kiln passes` lists them: {}", name, fmt::join(names, ", "));
}

void checkLevelName(const std::string& level) {
  const auto& levels = allLevels();
  if (std::find(levels.begin(), levels.end(), level) == levels.end())
    usageError("unknown IR level '{}'; choose one of: {}", level, fmt::join(levels, ", "));
}

namespace {

std::optional<DType> parseCast(const std::string& text) {
  if (text.empty()) return std::nullopt;
  auto t = parseDType(text);
  if (!t || (*t != DType::F32 && *t != DType::F16 && *t != DType::BF16))
    usageError("--dtype must be f32, f16 or bf16, not '{}'", text);
  return t;
}

// For a check: results are compared at the tolerance of the lowest precision the model computes in (an f32
// output of a bf16 model carries bf16 rounding from inside).
DType checkType(const kernel::Program& kp, DType out) {
  DType t = out;
  for (auto& b : kp.buffers)
    if ((b.kind == loop::Buffer::Kind::Input || b.kind == loop::Buffer::Kind::Weight) &&
        (b.dtype == DType::F16 || b.dtype == DType::BF16) && tolerance(b.dtype) > tolerance(t))
      t = b.dtype;
  return t;
}

std::vector<frontend::InputOverride> parseInputs(const std::vector<std::string>& texts) {
  std::vector<frontend::InputOverride> out;
  for (auto& t : texts) out.push_back(frontend::parseInputOverride(t));
  return out;
}

// Writes a file atomically (temporary + rename) so a failure leaves nothing behind.
void writeOutputFile(const std::string& path, const std::string& text) {
  fs::path target(path), tmp = target;
  tmp += ".kiln-tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out) {
      std::error_code ec;
      removeTree(tmp.string());
      userError("cannot write -o '{}'; check the directory exists and is writable", path);
    }
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) {
    removeTree(tmp.string());
    userError("cannot write -o '{}': {}", path, ec.message());
  }
}

std::string hexHash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return fmt::format("{:016x}", h);
}

// Compiled kernels for a GPU run are cached by model content, input shapes, --dtype, kiln version and build,
// and arch.
fs::path cacheDirFor(const RunCommand& c, const kernel::Program& kp) {
  // The model's content, hashed in chunks (a 1.1B-parameter archive is 4.4 GB).
  std::ifstream in(c.model, std::ios::binary);
  uint64_t h = 1469598103934665603ull;  // FNV-1a, 64-bit words
  std::vector<char> chunk(1 << 20);
  while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0) {
    size_t n = static_cast<size_t>(in.gcount()), i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, chunk.data() + i, 8);
      h = (h ^ w) * 1099511628211ull;
    }
    for (; i < n; ++i) h = (h ^ static_cast<unsigned char>(chunk[i])) * 1099511628211ull;
  }
  std::string key = fmt::format("{:016x}", h);
  for (int i : kp.inputs) key += fmt::format("|{}:{}", shapeString(kp.buffers[i].shape), dtypeName(kp.buffers[i].dtype));
  key += fmt::format("|{}|{}|{}", KILN_VERSION, c.arch, c.dtype);
  // The kiln build itself: a rebuilt compiler may emit different kernels under the same version number.
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) key += fmt::format("|{}|{}|{}", self.string(), fs::file_size(self, ec), fs::last_write_time(self, ec).time_since_epoch().count());
  const char* env = std::getenv("KILN_CACHE_DIR");
  const char* home = std::getenv("HOME");
  fs::path root = env ? fs::path(env) : home ? fs::path(home) / ".cache" / "kiln" : fs::temp_directory_path() / "kiln-cache";
  return root / (kp.modelName + "-" + hexHash(key));
}

}  // namespace

int runCompile(const CompileCommand& c, std::ostream& out) {
  checkLevelName(c.ir);
  if (!c.emit.empty() && c.emit != "cuda") usageError("--emit supports 'cuda', not '{}'", c.emit);
  if (!c.emit.empty() && c.output.empty()) usageError("--emit cuda needs -o DIR");
  auto inputs = parseInputs(c.inputs);
  std::string until = c.emit.empty() ? c.ir : "cuda";
  Compiled compiled;
  try {
    compiled = compileModel(c.model, inputs, c.pipeline, c.explainFusion && c.emit.empty() ? "loop" : until, parseCast(c.dtype));
  } catch (const StopRequested& stop) {
    if (c.output.empty() || !c.emit.empty()) out << stop.irText;
    else writeOutputFile(c.output, stop.irText);
    return 0;
  }
  if (c.explainFusion && c.emit.empty()) {
    std::string text = loop::explainFusion(compiled.loopIR);
    if (c.output.empty()) out << text;
    else writeOutputFile(c.output, text);
    return 0;
  }
  if (!c.emit.empty()) {
    cuda::writeArtifacts(compiled.kernelIR, compiled.cudaIR, c.output, cuda::ArtifactOptions{c.arch, !c.noCompile});
    out << fmt::format("kiln: wrote {} kernels of {} to {}\n", compiled.cudaIR.sources.size(), compiled.cudaIR.modelName, c.output);
    return 0;
  }
  std::string text = printLevel(compiled, c.ir, c.json);
  if (c.output.empty()) out << text;
  else writeOutputFile(c.output, text);
  return 0;
}

int runRun(const RunCommand& c, std::ostream& out) {
  auto inputs = parseInputs(c.inputs);
  auto cast = parseCast(c.dtype);
  Compiled compiled = compileModel(c.model, inputs, c.pipeline, "cuda", cast);
  const kernel::Program& kp = compiled.kernelIR;
  std::vector<HostTensor> args;
  for (size_t i = 0; i < kp.inputs.size(); ++i) {
    const loop::Buffer& b = kp.buffers[kp.inputs[i]];
    args.push_back(randomTensor(b.dtype, b.shape, c.seed * 7919 + i));
  }
  std::vector<HostTensor> results;
  std::string device;
  if (c.interpret) {
    results = kernel::interpret(kp, args);
    device = "CPU (Kernel-IR interpreter)";
  } else {
    std::string why;
    if (!runtime::gpuAvailable(&why))
      userError("kiln run needs a CUDA GPU: {}; use --interpret to run the kernels in the CPU interpreter", why);
    fs::path dir = cacheDirFor(c, kp);
    std::error_code ec;
    if (!fs::exists(dir / runtime::kManifestFileName, ec))
      cuda::writeArtifacts(kp, compiled.cudaIR, dir, cuda::ArtifactOptions{c.arch, true});
    runtime::Model model(dir);
    device = model.deviceName();
    std::vector<std::vector<std::byte>> bytes;
    for (auto& a : args) bytes.push_back(toBytes(a));
    auto outs = model.run(bytes);
    for (size_t i = 0; i < outs.size(); ++i) {
      const loop::Buffer& b = kp.buffers[kp.outputs[i]];
      results.push_back(fromBytes(b.dtype, b.shape, outs[i]));
    }
    if (c.benchIters > 0)
      out << fmt::format("kiln: {} kernels, {:.4f} ms per forward (CUDA events around {} back-to-back forwards after 3 warm-up forwards)\n",
                         kp.kernels.size(), model.timeMs(3, c.benchIters), c.benchIters);
  }
  out << fmt::format("kiln: ran {} ({} kernels) on {}\n", kp.modelName, kp.kernels.size(), device);
  if (!c.check) {
    for (size_t i = 0; i < results.size(); ++i) {
      double sum = 0;
      for (float v : results[i].values) sum += v;
      out << fmt::format("  output {}: {}[{}] sum {:.6g}\n", i, dtypeName(results[i].dtype), shapeString(results[i].shape), sum);
    }
    return 0;
  }
  std::vector<HostTensor> ref;
  try {
    ref = frontend::runReference(c.model, args, !c.interpret, cast);
  } catch (const UserError& e) {
    if (c.interpret) throw;
    // A trace that pins tensors to the CPU (transformers builds its masks with a traced device) cannot run
    // on the GPU; compare with its CPU run instead, and say so.
    out << fmt::format("kiln: {}; comparing with LibTorch on the CPU instead (trace the model on the GPU to compare there)\n", e.what());
    ref = frontend::runReference(c.model, args, false, cast);
  }
  if (ref.size() != results.size())
    userError("LibTorch returns {} outputs, kiln {}", ref.size(), results.size());
  bool ok = true;
  for (size_t i = 0; i < results.size(); ++i) {
    Comparison cmp = compare(results[i], ref[i]);
    DType ct = checkType(kp, ref[i].dtype);
    bool pass = passes(cmp, ct);
    ok = ok && pass;
    out << fmt::format("  output {}: {}[{}] rel_l2 {:.3e} max_abs {:.3e} (tolerance {:.0e}){} {}\n", i,
                       dtypeName(ref[i].dtype), shapeString(ref[i].shape), cmp.relL2, cmp.maxAbs, tolerance(ct),
                       cmp.hasNaN ? " NaN/Inf" : cmp.shapeMismatch ? " shape mismatch" : "", pass ? "PASS" : "FAIL");
  }
  out << (ok ? "kiln: check passed against LibTorch\n" : "kiln: check FAILED against LibTorch\n");
  return ok ? 0 : 1;
}

}  // namespace kiln
