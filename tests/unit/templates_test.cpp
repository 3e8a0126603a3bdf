// Every CUDA building block in templates/ compiles on its own under nvcc for sm_90, warnings as errors, and
// the copies embedded in the binary are the files in the source tree.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "kiln/cuda/emitter.h"
#include "kiln/cuda/templates.h"
#include "kiln/support/error.h"
#include "kiln/support/files.h"

namespace kiln::cuda {
namespace {
namespace fs = std::filesystem;

TEST(Templates, EmbeddedCopiesMatchTheSourceTree) {
  ASSERT_FALSE(templates().empty());
  for (const Template& t : templates()) {
    std::ifstream in(fs::path(KILN_SOURCE_DIR) / "templates" / t.name);
    ASSERT_TRUE(in) << t.name;
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_EQ(text.str(), t.text) << t.name << " changed since the build; rebuild kiln";
  }
}

TEST(Templates, EachCompilesAloneUnderNvcc) {
  fs::path dir = fs::temp_directory_path() / ("kiln-templates-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<std::string> units;
  for (const Template& t : templates()) {
    std::ofstream(dir / t.name) << t.text;
    std::string unit = std::string("alone_") + t.name + ".cu";
    std::ofstream(dir / unit) << "#include \"" << t.name << "\"\n";
    units.push_back(unit);
  }
  try {
    compileWithNvcc(dir, units, "sm_90");
  } catch (const UserError& e) {
    ADD_FAILURE() << e.what();
  }
  for (const std::string& u : units) EXPECT_TRUE(fs::exists(dir / (u.substr(0, u.size() - 3) + ".cubin"))) << u;
  removeTree(dir.string());
}

}  // namespace
}  // namespace kiln::cuda
