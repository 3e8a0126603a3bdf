// Helpers shared by kiln's unit tests.
#pragma once
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kiln/kernel/ir.h"
#include "kiln/support/files.h"
#include "kiln/support/host_tensor.h"

namespace kiln::test {

// models/fixtures/<name>.pt in the source tree.
inline std::string fixturePath(const std::string& name) {
  return (std::filesystem::path(KILN_SOURCE_DIR) / "models" / "fixtures" / (name + ".pt")).string();
}

// Every fixture's name (models/fixtures/*.pt), sorted: what the round-trip tests run over.
inline std::vector<std::string> allFixtures() {
  std::set<std::string> names;
  for (auto& e : std::filesystem::directory_iterator(std::filesystem::path(KILN_SOURCE_DIR) / "models" / "fixtures"))
    if (e.path().extension() == ".pt") names.insert(e.path().stem().string());
  return {names.begin(), names.end()};
}

// A fresh, empty directory under the system temp dir, removed when the test ends (with kiln::removeTree,
// not std::filesystem::remove_all: see kiln/support/files.h).
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() / fmt::format("kiln-test-{}-{}", ::getpid(), rd());
    std::filesystem::create_directories(path);
  }
  ~TempDir() { removeTree(path.string()); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

// Seeded random values for every input of a compiled program, Kernel IR or Loop IR (the same buffers and inputs; input i
// of seed s: randomTensor seed s*1000 + i).
template <class Program>
std::vector<HostTensor> randomInputs(const Program& kp, uint64_t seed) {
  std::vector<HostTensor> inputs;
  for (size_t i = 0; i < kp.inputs.size(); ++i) {
    const loop::Buffer& b = kp.buffers[kp.inputs[i]];
    inputs.push_back(randomTensor(b.dtype, b.shape, seed * 1000 + i));
  }
  return inputs;
}

}  // namespace kiln::test
