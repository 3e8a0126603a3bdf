// tile-share-kv-heads puts the query heads of one KV head in one attention block (8 for the TinyLlama shape), while the
// mma schedule stages 16 query rows: the second KV head's block starts at row 8, between multiples of the 16 rows it
// copies. Its rows past q's end must be zero-filled, not read: until ed46f5b the copy read them whenever 16 divided the
// heads (the interpreter's "cp.async out of bounds" on the TinyLlama-shaped decoder step). A 16-head, 2-KV-head bf16
// step traced at test time (python3 with torch and transformers) runs on the interpreter inside q's bounds.
#include <gtest/gtest.h>

#include "cli_support.h"

namespace kiln {
namespace {

using test::cli::contains;
using test::cli::describe;
using test::cli::kiln;
using test::cli::quote;
using test::cli::Result;

TEST(ShareKvHeads, AttentionCopiesNoQueryRowPastQ) {
  if (std::system("python3 -c 'import torch, transformers' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 with torch and transformers not available";
  test::TempDir tmp;
  const std::string step = (tmp.path / "step16.pt").string();
  const std::string trace = fmt::format(
      "python3 {} llama --hidden 256 --heads 16 --kv-heads 2 --layers 1 --dtype bf16 -o {} >/dev/null 2>&1",
      quote((std::filesystem::path(KILN_SOURCE_DIR) / "models/hf_decode.py").string()), quote(step));
  ASSERT_EQ(std::system(trace.c_str()), 0) << trace;
  Result schedule = kiln({"compile", step, "--ir", "tile"});
  ASSERT_EQ(schedule.code, 0) << describe(schedule);
  EXPECT_TRUE(contains(schedule.out, "block_q=16 block_rows=8")) << "the case this test is for:\n" << schedule.out;
  test::cli::expectCheckPasses(kiln({"run", step, "--check", "--interpret"}));
}

}  // namespace
}  // namespace kiln
