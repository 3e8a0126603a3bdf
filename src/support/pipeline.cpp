#include "kiln/support/pipeline.h"

#include "kiln/support/progress.h"

#include <fmt/format.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "kiln/support/error.h"
#include "kiln/support/output.h"

namespace kiln {

const std::vector<PassInfo>& allPasses() {
  static const std::vector<PassInfo> passes = {
#define KILN_PASS(name, level, desc) {name, level, desc, true},
#define KILN_PASS_OFF(name, level, desc) {name, level, desc, false},
#include "kiln/support/passes.def"
#undef KILN_PASS
#undef KILN_PASS_OFF
  };
  return passes;
}

const PassInfo* findPass(const std::string& name) {
  for (auto& p : allPasses())
    if (p.name == name) return &p;
  return nullptr;
}

bool isLowering(const PassInfo& pass) {
  for (auto& p : allPasses())
    if (p.level == pass.level) return p.name == pass.name;
  return false;
}

const std::vector<std::string>& allLevels() {
  static const std::vector<std::string> levels = {"torch", "tensor", "loop", "tile", "kernel", "cuda"};
  return levels;
}

bool PipelineOptions::runs(const PassInfo& pass) const {
  if (disable.count(pass.name)) return false;
  return pass.onByDefault || enable.count(pass.name) > 0;
}

bool PassRunner::skipped(const std::string& name) {
  const PassInfo* info = findPass(name);
  KILN_ASSERT(info, "pass '{}' is not in passes.def", name);
  if (opts_.runs(*info)) return false;
  if (opts_.verbosity > 0)
    *opts_.log << fmt::format("kiln: pass {} skipped ({})\n", name,
                              opts_.disable.count(name) ? "--disable-pass" : "off by default; --enable-pass runs it");
  return true;
}

PassRunner::PassRunner(PipelineOptions opts) : opts_(std::move(opts)) {
  if (!opts_.log) opts_.log = &std::cerr;
  if (opts_.verbosity > 0 || opts_.timePasses || !opts_.printAfter.empty()) progress::disable();  // their lines say more
  // The -o rules (kiln/support/output.h): a new, empty or kiln-marked directory, files of the user's never replaced,
  // nothing written through a symlink placed there. Each dump is staged and moved into place at the end.
  if (!opts_.dumpDir.empty()) dump_ = std::make_unique<OutputDir>(opts_.dumpDir, "--dump-dir");
}

// The dumps are moved into place whether the run finished, stopped (--stop-after) or failed: the IR before a failing
// pass is what a user looks at. A failure to do so is reported, not thrown from a destructor.
PassRunner::~PassRunner() {
  progress::clear();
  if (!dump_) return;
  try {
    dump_->commit();
  } catch (const std::exception& e) {
    *opts_.log << fmt::format("kiln: the IR dumps were not written: {}\n", e.what());
  }
}

void PassRunner::started(const std::string& name) {
  if (!progress::enabled()) return;
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begun_).count();
  progress::show(fmt::format("kiln: {} ({} of {} passes, {:.1f} s)", name, index_ + 1, allPasses().size(), seconds));
}

void PassRunner::finish(const std::string& name, std::chrono::steady_clock::time_point t0, bool changed,
                        const std::function<std::string()>& text, const std::function<void()>& verifyFn) {
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  timings_.push_back({name, seconds});
  KILN_ASSERT(findPass(name), "pass '{}' is not in passes.def", name);
  ++index_;
  if (opts_.verify) {
    try {
      verifyFn();
    } catch (const InternalError& e) {
      failed(name, "verifier after pass", e, text);
    }
  }
  std::ostream& log = *opts_.log;
  if (opts_.verbosity >= 1) log << fmt::format("kiln: pass {}{}\n", name, changed ? "" : " (no change)");
  bool wantText = opts_.verbosity >= 2 || opts_.printAfter.count(name) || !opts_.dumpDir.empty() ||
                  (opts_.stopAfter && *opts_.stopAfter == name);
  if (!wantText) return;
  std::string now = text();
  if (opts_.verbosity >= 2 && changed) {
    std::string diff = unifiedDiff(previousText_, now, "before " + name, "after " + name);
    if (!diff.empty()) log << diff;
  }
  if (opts_.printAfter.count(name)) log << fmt::format("// ----- IR after {} -----\n{}", name, now);
  if (dump_) {
    auto path = std::filesystem::path(dump_->staging()) / fmt::format("{:02}-{}.txt", index_, name);
    std::ofstream out(path);
    out << now;
    if (!out) userError("cannot write '{}' in --dump-dir {}; check the directory is writable", path.filename().string(),
                        opts_.dumpDir);
  }
  previousText_ = now;
  if (opts_.stopAfter && *opts_.stopAfter == name) throw StopRequested{name, now};
}

void PassRunner::failed(const std::string& name, const char* where, const InternalError& e,
                        const std::function<std::string()>& text) {
  if (!text) throw InternalError(fmt::format("{} ({} '{}')", e.what(), where, name));
  // A fresh file per failure (mkstemps creates it, mode 0600), never a fixed name another run or user could own.
  std::string path = (std::filesystem::temp_directory_path() / fmt::format("kiln-failed-{}-XXXXXX.txt", name)).string();
  int fd = mkstemps(path.data(), 4);
  if (fd < 0) throw InternalError(fmt::format("{} ({} '{}'; no temporary file for the IR could be made)", e.what(), where, name));
  ::close(fd);
  std::string ir;
  try {
    ir = text();
  } catch (const std::exception& printing) {
    ir = fmt::format("// the IR could not be printed: {}\n", printing.what());
  }
  std::ofstream out(path);
  out << ir;
  throw InternalError(fmt::format("{} ({} '{}'; IR {}written to {})", e.what(), where, name, out ? "" : "only partly ", path));
}

void PassRunner::printTimings() {
  if (!opts_.timePasses) return;
  double total = 0;
  for (auto& [n, s] : timings_) total += s;
  std::ostream& log = *opts_.log;
  log << "kiln: pass timings\n";
  for (auto& [n, s] : timings_)
    log << fmt::format("  {:>9.3f} ms  {:5.1f}%  {}\n", s * 1e3, total > 0 ? 100 * s / total : 0.0, n);
  log << fmt::format("  {:>9.3f} ms  total\n", total * 1e3);
}

namespace {
std::vector<std::string> splitLines(const std::string& s) {
  std::vector<std::string> lines;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}
}  // namespace

std::string unifiedDiff(const std::string& before, const std::string& after, const std::string& fromName,
                        const std::string& toName) {
  auto a = splitLines(before), b = splitLines(after);
  size_t n = a.size(), m = b.size();
  // Longest common subsequence table; IR dumps are small enough for the quadratic algorithm.
  std::vector<std::vector<uint32_t>> lcs(n + 1, std::vector<uint32_t>(m + 1, 0));
  for (size_t i = n; i-- > 0;)
    for (size_t j = m; j-- > 0;)
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  struct Line {
    char tag;
    std::string text;
    size_t ai, bi;
  };
  std::vector<Line> ops;
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] == b[j]) ops.push_back({' ', a[i], i++, j++});
    else if (j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j])) ops.push_back({'+', b[j], i, j++});
    else ops.push_back({'-', a[i], i++, j});
  }
  const size_t context = 3;
  std::string out;
  size_t k = 0;
  while (k < ops.size()) {
    if (ops[k].tag == ' ') {
      ++k;
      continue;
    }
    size_t start = k >= context ? k - context : 0, end = k;
    // Extend the hunk while changes are within 2*context lines of each other.
    size_t last = k;
    for (size_t q = k; q < ops.size(); ++q) {
      if (ops[q].tag != ' ') last = q;
      else if (q - last > 2 * context) break;
    }
    end = std::min(ops.size(), last + context + 1);
    if (out.empty()) out += fmt::format("--- {}\n+++ {}\n", fromName, toName);
    size_t aCount = 0, bCount = 0;
    for (size_t q = start; q < end; ++q) {
      if (ops[q].tag != '+') ++aCount;
      if (ops[q].tag != '-') ++bCount;
    }
    out += fmt::format("@@ -{},{} +{},{} @@\n", ops[start].ai + 1, aCount, ops[start].bi + 1, bCount);
    for (size_t q = start; q < end; ++q) out += fmt::format("{}{}\n", ops[q].tag, ops[q].text);
    k = end;
  }
  return out;
}

}  // namespace kiln
