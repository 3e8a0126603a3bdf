// Writes the artifacts of `kiln compile --emit cuda -o DIR` (see emitter.h).
#include <fmt/format.h>
#include <iostream>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <set>
#include <thread>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "kiln/cuda/emitter.h"
#include "kiln/cuda/memory_plan.h"
#include "kiln/cuda/templates.h"
#include "kiln/runtime/manifest.h"
#include "kiln/support/error.h"
#include "kiln/support/hash.h"
#include "kiln/support/files.h"
#include "kiln/support/output.h"
#include "kiln/support/process.h"
#include "kiln/support/progress.h"

#ifndef KILN_NVCC
#define KILN_NVCC "nvcc"
#endif
#ifndef KILN_VERSION
#define KILN_VERSION "0.1.0"
#endif

namespace kiln::cuda {
namespace fs = std::filesystem;
namespace {

runtime::BufferKind kindOf(loop::Buffer::Kind k) {
  switch (k) {
    case loop::Buffer::Kind::Input: return runtime::BufferKind::Input;
    case loop::Buffer::Kind::Weight: return runtime::BufferKind::Weight;
    case loop::Buffer::Kind::Temp: return runtime::BufferKind::Temp;
    case loop::Buffer::Kind::Output: return runtime::BufferKind::Output;
    case loop::Buffer::Kind::Counters: return runtime::BufferKind::Counters;
  }
  return runtime::BufferKind::Temp;
}


// Kernels whose code is identical but for their names (the same op in every decoder layer) share one
// cubin: the key is the source with the kernel's name and its comment lines removed.
std::string codeKey(const Source& s) {
  std::string key;
  size_t pos = 0;
  while (pos < s.text.size()) {
    size_t end = s.text.find('\n', pos);
    if (end == std::string::npos) end = s.text.size();
    std::string line = s.text.substr(pos, end - pos);
    if (line.rfind("//", 0) != 0) {
      for (size_t at; (at = line.find(s.kernel)) != std::string::npos;) line.replace(at, s.kernel.size(), "@");
      key += line + "\n";
    }
    pos = end + 1;
  }
  return key;
}

// The weights file of a directory's entries: each weight's bytes appended (aligned), except where an earlier entry
// stored the same bytes.
class WeightsFile {
 public:
  // `anyEqual`: the bytes may also be those of a weight of this entry (a state's initial value, only ever read whole).
  int64_t place(const std::vector<std::byte>& bytes, bool anyEqual = false) {
    const uint64_t key = fnv1aWords(kFnvOffsetBasis, bytes.data(), bytes.size());
    if (int64_t at = find(earlier_, key, bytes); at >= 0) return at;
    if (int64_t at = anyEqual ? find(entry_, key, bytes) : -1; at >= 0) return at;
    const auto offset = static_cast<int64_t>(data_.size());
    data_.insert(data_.end(), bytes.begin(), bytes.end());
    data_.resize(static_cast<size_t>(runtime::arenaAligned(static_cast<int64_t>(data_.size()))));
    entry_.emplace(key, std::pair{offset, static_cast<int64_t>(bytes.size())});
    return offset;
  }
  // The weights placed so far become those later entries reuse (an entry's own equal weights stay apart).
  void endEntry() {
    earlier_.insert(entry_.begin(), entry_.end());
    entry_.clear();
  }
  const std::vector<std::byte>& data() const { return data_; }

 private:
  using Placed = std::multimap<uint64_t, std::pair<int64_t, int64_t>>;  // hash -> (offset, bytes)
  int64_t find(const Placed& placed, uint64_t key, const std::vector<std::byte>& bytes) const {
    auto [first, last] = placed.equal_range(key);
    for (auto it = first; it != last; ++it)
      if (it->second.second == static_cast<int64_t>(bytes.size()) &&
          std::equal(bytes.begin(), bytes.end(), data_.begin() + static_cast<std::ptrdiff_t>(it->second.first)))
        return it->second.first;
    return -1;
  }
  std::vector<std::byte> data_;
  Placed earlier_, entry_;
};

// The entry's states (the program's last inputs and outputs, pairwise) with their initial values placed in the weights
// file, and its decode interface, into m.
void recordStates(const ArtifactEntry& e, WeightsFile& weights, runtime::Manifest& m) {
  const size_t states = e.states.size();
  KILN_ASSERT(m.inputs.size() >= states && m.outputs.size() >= states, "{} states for {} inputs and {} outputs", states,
              m.inputs.size(), m.outputs.size());
  for (size_t i = 0; i < states; ++i) {
    const ArtifactState& s = e.states[i];
    runtime::StateInfo info{s.name, m.inputs[m.inputs.size() - states + i], m.outputs[m.outputs.size() - states + i], -1};
    const runtime::BufferInfo* in = m.findBuffer(info.input);
    KILN_ASSERT(in->dtype == s.initial.dtype && in->shape == s.initial.shape, "state {}: initial value of another type", s.name);
    info.initialOffset = weights.place(toBytes(s.initial), /*anyEqual=*/true);
    m.states.push_back(std::move(info));
  }
  if (!e.decode) return;
  KILN_ASSERT(std::max(e.decode->tokenArgument, e.decode->positionArgument) + states < m.inputs.size(),
              "decode inputs {} and {} among {} inputs and {} states", e.decode->tokenArgument, e.decode->positionArgument,
              m.inputs.size(), states);
  m.decode = runtime::DecodeInfo{m.inputs[e.decode->tokenArgument], m.inputs[e.decode->positionArgument],
                                 e.decode->cachePositions, e.decode->vocabulary};
}

// The manifest of one entry: its buffers where the memory plan puts them (cuda::planMemory), its weights placed in the
// weights file, its kernels with their cubins (kernels of identical code share one).
runtime::Manifest plan(const ArtifactEntry& e, const ArtifactOptions& opts, WeightsFile& weights,
                       std::vector<std::string>& toCompile) {
  const kernel::Program& p = *e.program;
  const Module& module = *e.module;
  runtime::Manifest m;
  m.kilnVersion = KILN_VERSION;
  m.model = p.modelName;
  m.arch = opts.arch;
  const MemoryPlan memory = planMemory(p);
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const loop::Buffer& buf = p.buffers[b];
    runtime::BufferInfo info;
    info.id = static_cast<int64_t>(b);
    info.name = buf.name;
    info.kind = kindOf(buf.kind);
    info.dtype = buf.dtype;
    info.shape = buf.shape;
    info.bytes = numel(buf.shape) * dtypeBytes(buf.dtype);
    info.offset = memory.offsets[b];
    info.inPlaceOf = memory.inPlaceOf[b];
    if (buf.kind == loop::Buffer::Kind::Weight) {
      info.weightOffset = weights.place(toBytes(HostTensor{buf.dtype, buf.shape, buf.weight->values}));
    }
    m.buffers.push_back(info);
  }
  m.arenaBytes = memory.arenaBytes;
  for (int i : p.inputs) m.inputs.push_back(i);
  for (int o : p.outputs) m.outputs.push_back(o);
  recordStates(e, weights, m);
  std::map<std::string, std::string> firstWithCode;  // code key -> kernel compiled for it
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const kernel::Kernel& k = p.kernels[i];
    runtime::KernelInfo info;
    info.name = k.name;
    info.source = module.sources[i].file;
    auto [it, fresh] = firstWithCode.emplace(codeKey(module.sources[i]), k.name);
    if (fresh) toCompile.push_back(module.sources[i].file);
    info.entry = it->second;
    info.cubin = it->second + ".cubin";
    for (auto& prm : k.params) info.params.push_back(prm.buffer);
    for (int d = 0; d < 3; ++d) {
      info.grid[d] = static_cast<int>(k.grid[d]);
      info.block[d] = static_cast<int>(k.block[d]);
    }
    info.grid[0] = static_cast<int>(k.grid[0] / k.groups);  // Kernel::groups: the body's blocks packed into thread blocks
    info.block[0] = static_cast<int>(k.block[0] * k.groups);
    info.sharedBytes = k.groups * k.groupSharedBytes();
    info.programmaticLaunch = k.programmaticLaunch;
    for (const kernel::TensorMap& t : k.tensorMaps)
      info.tensorMaps.push_back({t.param, t.offset, t.rows, t.cols, t.rowStride, t.boxRows, t.boxCols, t.swizzle128});
    m.kernels.push_back(info);
  }
  return m;
}

void writeFile(const fs::path& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) userError("cannot write '{}'; check the output directory is writable and the disk has space", path.string());
}

void writeText(const fs::path& path, const std::string& text) { writeFile(path, text.data(), text.size()); }

}  // namespace

namespace {

// Runs `KILN_NVCC ARGS...` in `dir` (kiln/support/process.h: no shell). Returns what nvcc wrote to stdout and stderr
// (empty on success: warnings are errors), with a note of the exit status if it failed.
std::string runNvcc(const fs::path& dir, const std::vector<std::string>& files, const std::string& arch) {
  std::vector<std::string> args = {KILN_NVCC, "-cubin", "-arch=" + arch, "-O3", "-std=c++17", "-Werror",
                                   "all-warnings", "--output-directory", "."};
  args.insert(args.end(), files.begin(), files.end());
  ProcessResult r = runProgram(args, dir.string(), "install the CUDA 13.0 toolkit at /usr/local/cuda");
  if (r.exitStatus > 128) r.output += fmt::format("\n(nvcc killed by signal {})", r.exitStatus - 128);
  else if (r.exitStatus != 0) r.output += fmt::format("\n(nvcc exit status {})", r.exitStatus);
  return r.output;
}

}  // namespace

// Compiles in parallel: one worker per core, each running nvcc on batches of its share of the files (a few files
// per nvcc: its start-up is paid per batch, and the progress line can count the kernels done).
std::string compileWithNvcc(const fs::path& dir, const std::vector<std::string>& files, const std::string& arch) {
  constexpr size_t kFilesPerNvcc = 4;
  size_t workers = std::max<size_t>(1, std::min<size_t>(files.size(), std::thread::hardware_concurrency()));
  std::vector<std::vector<std::string>> shares(workers);
  for (size_t i = 0; i < files.size(); ++i) shares[i % workers].push_back(files[i]);
  std::atomic<size_t> done{0};
  const auto start = std::chrono::steady_clock::now();
  auto report = [&] {
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    progress::show(fmt::format("kiln: nvcc {}/{} kernels, {:.1f} s", done.load(), files.size(), seconds));
  };
  std::vector<std::future<std::string>> logs;
  for (auto& share : shares)
    logs.push_back(std::async(std::launch::async, [&, share] {
      std::string log;
      for (size_t b = 0; b < share.size(); b += kFilesPerNvcc) {
        std::vector<std::string> batch(share.begin() + static_cast<std::ptrdiff_t>(b),
                                       share.begin() + static_cast<std::ptrdiff_t>(std::min(share.size(), b + kFilesPerNvcc)));
        log += runNvcc(dir, batch, arch);
        done += batch.size();
      }
      return log;
    }));
  report();
  for (auto& l : logs)  // the line moves on every half second while the workers run
    while (l.wait_for(std::chrono::milliseconds(500)) != std::future_status::ready) report();
  progress::clear();
  std::string log;
  for (auto& l : logs) log += l.get();
  if (!log.empty()) {
    std::string first = log.substr(0, log.find('\n'));
    std::cerr << log;  // nvcc's own lines, before kiln's one-line error (which escapes any control byte it quotes)
    userError("nvcc failed on kiln's kernels in {} ({}); this is a kiln bug, please report it with the .cu files and "
              "nvcc's log above", dir.string(), first);
  }
  return log;
}

std::string nvccIdentity() {
  std::error_code ec;
  fs::path nvcc = fs::canonical(KILN_NVCC, ec);
  if (ec) return KILN_NVCC;
  return fmt::format("{} {} {}", nvcc.string(), fs::file_size(nvcc, ec), fs::last_write_time(nvcc, ec).time_since_epoch().count());
}

void writeArtifacts(const kernel::Program& p, const Module& m, const fs::path& dir, const ArtifactOptions& opts) {
  writeArtifacts({ArtifactEntry{"", &p, &m}}, dir, opts);
}

void writeArtifacts(const std::vector<ArtifactEntry>& entries, const fs::path& dir, const ArtifactOptions& opts) {
  KILN_ASSERT(!entries.empty() && entries[0].name.empty(), "writeArtifacts: the first entry is the unnamed one");
  for (size_t e = 1; e < entries.size(); ++e)
    for (const kernel::Kernel& k : entries[e].program->kernels)
      KILN_ASSERT(k.name.rfind(entries[e].name + "_", 0) == 0, "writeArtifacts: kernel {} of entry {} is not named after it",
                  k.name, entries[e].name);
  OutputDir out(dir.string());  // refuses a directory kiln did not write; see kiln/support/output.h
  fs::path tmp = out.staging();
  for (const Template& t : templates()) writeText(tmp / t.name, t.text);
  WeightsFile weights;
  std::vector<std::string> toCompile;
  std::vector<runtime::Manifest> manifests;
  for (const ArtifactEntry& e : entries) {
    for (const Source& s : e.module->sources) writeText(tmp / s.file, s.text);
    manifests.push_back(plan(e, opts, weights, toCompile));
    weights.endEntry();
  }
  writeFile(tmp / manifests[0].weightsFile, weights.data().data(), weights.data().size());
  if (opts.compile && !toCompile.empty()) compileWithNvcc(tmp, toCompile, opts.arch);
  // Each file's size and hash, so that a loader notices one changed or truncated since (runtime::verifyFiles).
  const runtime::FileInfo weightsInfo = runtime::describeFile(tmp, manifests[0].weightsFile);
  for (size_t e = entries.size(); e-- > 0;) {  // the first entry's manifest.json written last
    runtime::Manifest& manifest = manifests[e];
    std::set<std::string> listed{manifest.weightsFile};
    manifest.files.push_back(weightsInfo);
    std::error_code ec;
    for (const runtime::KernelInfo& k : manifest.kernels)
      if (listed.insert(k.cubin).second && fs::exists(tmp / k.cubin, ec)) manifest.files.push_back(runtime::describeFile(tmp, k.cubin));
    runtime::writeManifest(manifest, tmp, entries[e].name);
  }
  out.commit(runtime::kManifestFileName);  // the manifest last: a reader that finds it finds the rest
}

}  // namespace kiln::cuda
