// The op catalog (kiln/tensor/op_catalog.h) is the one source of `kiln ops`, docs/ops.md's list and the lowering's
// supported ops: every op it lists is lowered (or rewritten at import), every op lowered is listed, and docs/ops.md
// holds exactly what `kiln ops --markdown` prints.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "kiln/tensor/ir.h"
#include "kiln/tensor/op_catalog.h"
#include "test_support.h"

namespace kiln::tensor {
namespace {

TEST(OpCatalog, ListsExactlyTheOpsTheLoweringHandles) {
  std::set<std::string> catalog, atImport;
  for (const OpEntry& op : opCatalog()) {
    EXPECT_TRUE(catalog.insert(op.name).second) << op.name << " listed twice";
    EXPECT_NE(*op.computes, '\0') << op.name << " says nothing of what kiln computes";
    if (op.atImport) atImport.insert(op.name);
  }
  std::set<std::string> lowered;
  for (const std::string& name : loweredOps()) lowered.insert(name);
  for (const std::string& name : lowered) {
    EXPECT_TRUE(catalog.count(name)) << name << " is lowered but not in the catalog (kiln ops, docs/ops.md)";
    EXPECT_FALSE(atImport.count(name)) << name << " is lowered but marked as rewritten at import";
  }
  for (const std::string& name : catalog)
    EXPECT_TRUE(lowered.count(name) || atImport.count(name)) << name << " is listed but nothing lowers it";
  const std::vector<std::string> supported = supportedOps();
  EXPECT_EQ(std::set<std::string>(supported.begin(), supported.end()), catalog);
}

TEST(OpCatalog, DocsOpsMdHoldsTheGeneratedList) {
  std::ifstream in(std::string(KILN_SOURCE_DIR) + "/docs/ops.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str(), generated = opsMarkdown();
  const size_t begin = doc.find("<!-- BEGIN kiln ops --markdown");
  const size_t end = doc.find("<!-- END kiln ops --markdown -->\n");
  ASSERT_NE(begin, std::string::npos) << "docs/ops.md lost its BEGIN marker";
  ASSERT_NE(end, std::string::npos) << "docs/ops.md lost its END marker";
  EXPECT_EQ(doc.substr(begin, end + std::string("<!-- END kiln ops --markdown -->\n").size() - begin), generated)
      << "docs/ops.md differs from `kiln ops --markdown`: replace its BEGIN..END block with that command's output";
}

}  // namespace
}  // namespace kiln::tensor
