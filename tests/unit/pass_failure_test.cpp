// DESIGN.md §3.6: a compiler bug inside a pass is an internal error naming the pass, with the IR it failed on
// written to a fresh temporary file whose path the message gives; the verifier's failures after a pass likewise.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "kiln/support/error.h"
#include "kiln/support/pipeline.h"

namespace kiln::pass_failure_test {

// A stand-in IR for the pass runner (found by argument-dependent lookup, as each level's print and verify are).
struct Ir {
  std::string text = "ir v1\n";
  bool broken = false;
};
std::string print(const Ir& ir) { return ir.text; }
void verify(const Ir& ir) {
  if (ir.broken) throw InternalError("ir verifier: broken");
}

// The path after "IR written to " in an internal error's message.
std::string writtenPath(const std::string& message) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(message, m, std::regex("IR written to ([^;)]+)"))) << message;
  return m.size() > 1 ? m[1].str() : "";
}

std::string readAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

PipelineOptions quiet() {
  PipelineOptions o;
  static std::ostringstream sink;
  o.log = &sink;
  return o;
}

TEST(PassFailure, AnInternalErrorInsideAPassNamesItAndWritesTheIrToAFreshFile) {
  std::vector<std::string> paths;
  for (int attempt = 0; attempt < 2; ++attempt) {
    PassRunner run(quiet());
    Ir ir;
    try {
      run.pass(ir, "tile-shape-products", [](Ir& x) -> bool {
        x.text = "ir v2, half rewritten\n";
        throw InternalError("shape-products: a tile without rows");
      });
      FAIL() << "the internal error was swallowed";
    } catch (const InternalError& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("shape-products: a tile without rows"), std::string::npos) << what;
      EXPECT_NE(what.find("in pass 'tile-shape-products'"), std::string::npos) << what;
      paths.push_back(writtenPath(what));
      EXPECT_EQ(readAll(paths.back()), "ir v2, half rewritten\n");
    }
  }
  EXPECT_NE(paths[0], paths[1]) << "each failure gets its own file";
  for (auto& p : paths) std::filesystem::remove(p);
}

TEST(PassFailure, TheVerifierAfterAPassNamesItToo) {
  PassRunner run(quiet());
  Ir ir;
  try {
    run.pass(ir, "tile-shape-products", [](Ir& x) {
      x.broken = true;
      return true;
    });
    FAIL() << "the verifier's error was swallowed";
  } catch (const InternalError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("verifier after pass 'tile-shape-products'"), std::string::npos) << what;
    std::string path = writtenPath(what);
    EXPECT_EQ(readAll(path), "ir v1\n");
    std::filesystem::remove(path);
  }
}

TEST(PassFailure, ALoweringThatFailsIsNamedWithoutAnIrFile) {
  PassRunner run(quiet());
  try {
    run.produce("tile-lower-from-loop", []() -> Ir { throw InternalError("lowering: no schedule"); });
    FAIL() << "the internal error was swallowed";
  } catch (const InternalError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("(in pass 'tile-lower-from-loop')"), std::string::npos) << what;
    EXPECT_EQ(what.find("IR written"), std::string::npos) << what;
  }
}

}  // namespace kiln::pass_failure_test
