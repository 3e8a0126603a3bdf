// Running the `kiln` executable as a subprocess in tests: its exit code, stdout and stderr, and checks of
// the one-line "kiln: error: ..." messages (DESIGN.md §3.6).
#pragma once
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.h"

namespace kiln::test::cli {
namespace fs = std::filesystem;

inline std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Single-quotes s for /bin/sh.
inline std::string quote(const std::string& s) {
  std::string q;
  q.push_back('\'');
  for (char c : s) {
    if (c == '\'') q.append("'\\''");
    else q.push_back(c);
  }
  q.push_back('\'');
  return q;
}

// Writes `script` to dir/make.py and runs it with python3 (it saves its traces into `dir`); false if it failed.
inline bool runPython(const fs::path& dir, const std::string& script) {
  std::ofstream(dir / "make.py") << script;
  return std::system(("python3 " + quote((dir / "make.py").string()) + " >/dev/null 2>&1").c_str()) == 0;
}

// Whether python3 with torch runs here (asked once): tests that trace their modules at test time skip without it.
inline bool haveTorch() {
  static const bool torch = std::system("python3 -c 'import torch' >/dev/null 2>&1") == 0;
  return torch;
}

struct Result {
  int code = -1;
  std::string out, err;
};

// Runs `kiln ARGS...` in `cwd` (the repository root unless given) with stdout and stderr captured.
inline Result kiln(const std::vector<std::string>& args, const fs::path& cwd = KILN_SOURCE_DIR) {
  TempDir tmp;
  std::string cmd = fmt::format("cd {} && {}", quote(cwd.string()), quote(KILN_BINARY));
  for (auto& a : args) cmd += fmt::format(" {}", quote(a));
  cmd += fmt::format(" >{} 2>{} </dev/null", quote((tmp.path / "out").string()), quote((tmp.path / "err").string()));
  int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  r.out = readFile(tmp.path / "out");
  r.err = readFile(tmp.path / "err");
  return r;
}

inline bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

inline std::string describe(const Result& r) {
  return fmt::format("exit {}\n--- stdout ---\n{}\n--- stderr ---\n{}", r.code, r.out.substr(0, 4000), r.err);
}

// stderr is exactly one line "kiln: error: ..." containing every key word.
// A `kiln run --check` that passed: exit 0, every output PASS, and the closing "check passed".
inline void expectCheckPasses(const Result& r) {
  EXPECT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "PASS")) << describe(r);
  EXPECT_TRUE(contains(r.out, "check passed")) << describe(r);
}

inline void expectOneLineError(const Result& r, int code, const std::vector<std::string>& keys) {
  EXPECT_EQ(r.code, code) << describe(r);
  EXPECT_EQ(r.err.rfind("kiln: error:", 0), 0u) << describe(r);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "expected one line:\n" << describe(r);
  EXPECT_TRUE(!r.err.empty() && r.err.back() == '\n') << describe(r);
  for (auto& k : keys) EXPECT_TRUE(contains(r.err, k)) << "missing '" << k << "':\n" << describe(r);
}

inline std::vector<std::string> listDir(const fs::path& dir) {
  std::vector<std::string> names;
  for (auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace kiln::test::cli
