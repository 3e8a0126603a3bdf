// Damaged and hostile .pt files made at test time (python3 with torch; skipped without): each is one line, exit 1, never
// a crash (issue 45). The manifest's hostile fields are in runtime_manifest_test.cpp, the CLI's in cli_test.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "cli_support.h"
#include "test_support.h"

namespace kiln {
namespace {
using namespace test::cli;
using test::TempDir;

// A storage offset whose bytes overflow a 64-bit size (3 * 2^61, 2^62 in the tensor's pickle): the bounds check wrapped
// around and passed it, and LibTorch's freezing then crashed (3 * 2^61) or read outside the record (2^62; issue 45).
TEST(HostileFiles, StorageOffsetPastAnySizeIsOneLine) {
  if (std::system("python3 -c 'import torch' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 with torch not available";
  TempDir tmp;
  std::string script = fmt::format(
      "import pickletools, torch, zipfile\n"
      "class M(torch.nn.Module):\n"
      "    def __init__(self):\n"
      "        super().__init__()\n"
      "        self.register_buffer('w', torch.randn(16)[5:9])\n"
      "    def forward(self, x):\n"
      "        return x * self.w\n"
      "torch.jit.trace(M(), (torch.randn(4),)).save('{0}/good.pt')\n"
      "def offset(name, value):  # the int after the storage's persistent id is the tensor's storage offset\n"
      "    src, out = zipfile.ZipFile('{0}/good.pt'), zipfile.ZipFile('{0}/' + name, 'w')\n"
      "    for n in src.namelist():\n"
      "        data = src.read(n)\n"
      "        if n.endswith('/data.pkl'):\n"
      "            ops = list(pickletools.genops(data))\n"
      "            i = next(i for i, o in enumerate(ops) if o[0].name == 'BINPERSID') + 1\n"
      "            while ops[i][0].name not in ('BININT1', 'BININT2', 'BININT'): i += 1\n"
      "            data = data[:ops[i][2]] + b'\\x8a\\x08' + value.to_bytes(8, 'little') + data[ops[i + 1][2]:]\n"
      "        out.writestr(n, data)\n"
      "    out.close()\n"
      "offset('huge.pt', 3 << 61)\n"
      "offset('big.pt', 1 << 62)\n",
      tmp.path.string());
  ASSERT_TRUE(runPython(tmp.path, script)) << script;
  EXPECT_EQ(kiln({"compile", (tmp.path / "good.pt").string(), "--input", "x=4", "--ir", "torch"}).code, 0);
  for (const char* name : {"huge.pt", "big.pt"}) {
    const std::string m = (tmp.path / name).string();
    for (const char* command : {"compile", "inspect"}) {
      std::vector<std::string> args{command, m};
      if (std::string(command) == "compile") args.insert(args.end(), {"--input", "x=4", "--ir", "torch"});
      expectOneLineError(kiln(args), 1, {m, "is damaged: tensor 'w' (4 elements) has a storage offset",
                                         "overflow a 64-bit size"});
    }
  }
}

}  // namespace
}  // namespace kiln
