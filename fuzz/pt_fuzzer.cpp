// libFuzzer target for the .pt import (issue 14 item 7). The input is a list of archive records, each
//   [1 byte: name length n][n bytes: name][4 bytes, little-endian: length L][L bytes: contents]
// which the harness writes as a TorchScript archive with LibTorch's own writer, so that every input is a well-formed zip
// and the mutations land in the records themselves: the pickles (data.pkl, constants.pkl), the code, the tensor data,
// kiln_inputs.json. The archive then goes through kiln as `kiln compile --ir tensor` takes it (frontend import:
// validation, the debug records' check, freezing, shapes; tensor-lower-from-torch). The only acceptable outcomes are a Tensor-IR graph or a
// kiln::UserError with a one-line message; anything else (another exception, a crash, a hang, a blown memory limit) is
// a finding. Built and run by tests/fuzz_pt.sh; seeds are fixtures converted by fuzz/pt_records.py.
//
// Coverage: the harness is compiled with -fsanitize=fuzzer, kiln's libraries and LibTorch are not instrumented, so the
// mutations are not guided by what they reach; the seeds (real archives) keep them near valid ones.
#include <caffe2/serialize/inline_container.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kiln/driver/pipeline.h"
#include "kiln/support/error.h"

namespace {

struct Record {
  std::string name, contents;
};

std::vector<Record> parseRecords(const uint8_t* data, size_t size) {
  std::vector<Record> records;
  size_t at = 0;
  while (at < size && records.size() < 4096) {
    const size_t n = data[at++];
    if (n == 0 || at + n + 4 > size) break;
    Record r;
    r.name.assign(reinterpret_cast<const char*>(data + at), n);
    at += n;
    uint32_t length = 0;
    for (int i = 0; i < 4; ++i) length |= static_cast<uint32_t>(data[at + i]) << (8 * i);
    at += 4;
    if (length > size - at) length = static_cast<uint32_t>(size - at);
    r.contents.assign(reinterpret_cast<const char*>(data + at), length);
    at += length;
    records.push_back(std::move(r));
  }
  return records;
}

const std::string& archivePath() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/kiln-pt-fuzz-" + std::to_string(getpid()) + ".pt";
  }();
  return path;
}

}  // namespace

// LibTorch's loader allocates what a pickle claims (one mutated input asked for more than 8 GB; docs/fuzzing.md, not
// fixed). The address space is capped (KILN_PT_FUZZ_MEMORY_MB, default 5120) so that such an input ends as
// std::bad_alloc, which kiln reports in one line, instead of as the fuzzer's out-of-memory; a run that should find them
// sets it to 0 (no cap) and relies on -rss_limit_mb.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* env = std::getenv("KILN_PT_FUZZ_MEMORY_MB");
  const long mb = env ? std::strtol(env, nullptr, 10) : 5120;
  if (mb > 0) {
    const rlim_t bytes = static_cast<rlim_t>(mb) << 20;
    const rlimit cap{bytes, bytes};
    setrlimit(RLIMIT_AS, &cap);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<Record> records = parseRecords(data, size);
  if (records.empty()) return 0;
  try {  // the writer refusing a record (a duplicate name, say) is not what is fuzzed
    caffe2::serialize::PyTorchStreamWriter writer(archivePath());
    for (const Record& r : records) {
      if (r.name == "version" || r.name == ".data/version") {  // the writer writes the version record itself
        const long v = std::strtol(r.contents.c_str(), nullptr, 10);
        if (v > 0 && v < 1000) writer.setMinVersion(static_cast<uint64_t>(v));
        continue;
      }
      writer.writeRecord(r.name, r.contents.data(), r.contents.size());
    }
    writer.writeEndOfFile();
  } catch (...) {
    return 0;
  }
  static const bool verbose = std::getenv("KILN_PT_FUZZ_VERBOSE") != nullptr;  // say what each input came to
  try {
    kiln::Compiled c = kiln::compileModel(archivePath(), {}, kiln::PipelineOptions{}, "tensor");
    if (verbose) std::fprintf(stderr, "kiln-pt-fuzz: imported, %zu tensor nodes\n", c.tensorIR.nodes.size());
  } catch (const kiln::UserError& e) {
    const std::string what = e.what();
    if (verbose) std::fprintf(stderr, "kiln-pt-fuzz: refused: %s\n", what.c_str());
    if (what.find('\n') != std::string::npos) {
      std::fprintf(stderr, "import error of more than one line:\n%s\n", what.c_str());
      std::abort();
    }
  }
  return 0;
}
