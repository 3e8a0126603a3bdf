// Kernel IR's TMA tensor copies by hand: thread 0 arms an mbarrier with the box's bytes and copies one 8 x 32 box of a
// [10][40] f32 tensor map (128-byte swizzle) into shared memory; every thread waits for the phase and writes its
// elements out, undoing the swizzle. Block 1's box hangs past the map's last rows and columns, which arrive as zeros.
// The interpreter's rules (a read before the wait), the verifier's (destination alignment, box rows under the swizzle),
// nvcc for sm_90a; the manifest's tensor_maps; and tile-tma-copies choosing tma for a linear layer's product.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "kernel_test_support.h"
#include "kiln/runtime/manifest.h"

namespace kiln::kernel {
namespace {

using namespace kernel_test;

constexpr int64_t kRows = 10, kCols = 40, kBoxRows = 8, kBoxCols = 32, kBox = kBoxRows * kBoxCols;

enum class Fault { None, NoWait, MisalignedDestination, NarrowSwizzledBox };

Program boxCopy(Fault fault = Fault::None) {
  Kernel k;
  k.name = "k_tma";
  k.block = {64, 1, 1};
  k.grid = {2, 1, 1};
  SharedBuffer bars{"bars", 1};
  bars.mbarriers = true;
  k.shared = {SharedBuffer{"tile", kBox + 8}, bars};
  k.tensorMaps = {TensorMap{kX, 0, kRows, kCols, kCols, kBoxRows, fault == Fault::NarrowSwizzledBox ? 16 : kBoxCols, true}};
  k.body.push_back(ifLess(threadIdx(), idxConst(1), {mbarrierInit(1, idxConst(0), 1), fenceProxyAsync()}));
  k.body.push_back(barrier());
  const Idx row0 = blockIdx() * idxConst(4), col0 = blockIdx() * idxConst(16);  // block 1: rows 4..11, columns 16..47
  const Idx dst = idxConst(fault == Fault::MisalignedDestination ? 8 : 0);
  k.body.push_back(ifLess(threadIdx(), idxConst(1), {mbarrierArriveExpectTx(1, idxConst(0), kBox * 4), tmaLoad(0, dst, 0, col0, row0, 1, idxConst(0))}));
  if (fault != Fault::NoWait) k.body.push_back(mbarrierWait(1, idxConst(0), idxConst(0)));
  for (int64_t i = 0; i < kBox / 64; ++i) {  // element e = t + 64 i: box row e / 32, column e mod 32, chunk of 4 swizzled
    Idx e = threadIdx() + idxConst(64 * i), r = floorDiv(e, kBoxCols), c = mod(e, kBoxCols);
    Idx at = r * idxConst(kBoxCols) + idxXor(floorDiv(c, 4), mod(r, 8)) * idxConst(4) + mod(c, 4);
    k.body.push_back(storeGlobal(kY, blockIdx() * idxConst(kBox) + e, loadShared(0, at)));
  }
  return program(kRows * kCols, 2 * kBox, std::move(k));
}

TEST(KernelTma, BoxLandsSwizzledAndZeroFilled) {
  Program p = boxCopy();
  verify(p);
  HostTensor x = ramp(kRows * kCols);
  auto out = interpret(p, {x});
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t r = 0; r < kBoxRows; ++r)
      for (int64_t c = 0; c < kBoxCols; ++c) {
        const int64_t row = 4 * b + r, col = 16 * b + c;
        const float want = row < kRows && col < kCols ? x.values[static_cast<size_t>(row * kCols + col)] : 0.f;
        ASSERT_FLOAT_EQ(out[0].values[static_cast<size_t>(b * kBox + r * kBoxCols + c)], want) << b << " " << r << " " << c;
      }
  const std::string text = print(p);
  EXPECT_NE(text.find("tmap0: x[0 + row * 40 + col], 10 rows x 40 cols, boxes of 8 x 32, swizzle 128B"), std::string::npos) << text;
  EXPECT_NE(text.find("tma.load shared tile[0] <- tmap0[row "), std::string::npos) << text;
  EXPECT_NE(text.find("mbarrier.arrive.expect_tx bars[0], 1024 bytes"), std::string::npos) << text;
  const std::string cu = cuda::emit(p).sources[0].text;
  EXPECT_NE(cu.find("const __grid_constant__ CUtensorMap tmap0"), std::string::npos) << cu;
  EXPECT_NE(cu.find("kiln::tma_load_2d(&tile[0], &tmap0, "), std::string::npos) << cu;
  expectNvccCompiles(p);  // sm_90a
}

TEST(KernelTma, ReadingTheBoxBeforeTheWaitIsReported) {
  Program p = boxCopy(Fault::NoWait);
  verify(p);
  const std::string msg = errorOf([&] { interpret(p, {ramp(kRows * kCols)}); });
  EXPECT_NE(msg.find("which it has not waited for"), std::string::npos) << msg;
}

TEST(KernelTma, VerifierRules) {
  std::string msg = errorOf([&] { verify(boxCopy(Fault::MisalignedDestination)); });
  EXPECT_NE(msg.find("tma.load into tile[8]: the index is not provably a multiple of 256"), std::string::npos) << msg;
  msg = errorOf([&] { verify(boxCopy(Fault::NarrowSwizzledBox)); });
  EXPECT_NE(msg.find("the 128-byte swizzle needs box rows of 128 bytes, not 64"), std::string::npos) << msg;
  Program p = boxCopy();
  p.kernels[0].tensorMaps[0].offset = 2;  // 8 bytes: not a 16-byte multiple (one row fewer: still inside x)
  p.kernels[0].tensorMaps[0].rows = kRows - 1;
  msg = errorOf([&] { verify(p); });
  EXPECT_NE(msg.find("must be multiples of 16 bytes"), std::string::npos) << msg;
  p = boxCopy();
  p.target = targetFor("sm_80");
  msg = errorOf([&] { verify(p); });
  EXPECT_NE(msg.find("which has no TMA"), std::string::npos) << msg;
}

// The manifest carries each kernel's tensor maps (format 3) and refuses one that reaches past its buffer.
TEST(KernelTma, ManifestTensorMaps) {
  Program p = boxCopy();
  test::TempDir tmp;
  cuda::writeArtifacts(p, cuda::emit(p), tmp.path / "a", cuda::ArtifactOptions{"sm_90a", true});
  runtime::Manifest m = runtime::readManifest(tmp.path / "a");
  ASSERT_EQ(m.kernels.size(), 1u);
  ASSERT_EQ(m.kernels[0].tensorMaps.size(), 1u);
  const runtime::TensorMapInfo& t = m.kernels[0].tensorMaps[0];
  EXPECT_EQ(t.param, 0);
  EXPECT_EQ(t.rows, kRows);
  EXPECT_EQ(t.cols, kCols);
  EXPECT_EQ(t.rowStride, kCols);
  EXPECT_EQ(t.boxRows, kBoxRows);
  EXPECT_EQ(t.boxCols, kBoxCols);
  EXPECT_TRUE(t.swizzle128);
  auto j = nlohmann::json::parse(std::ifstream(tmp.path / "a" / "manifest.json"));
  j["kernels"][0]["tensor_maps"][0]["rows"] = kRows + 1;
  try {
    runtime::manifestFromJson(j, "m.json");
    ADD_FAILURE() << "a tensor map past its buffer was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor_maps[0]: the view reaches past the 1600 bytes of buffer 'x'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln::kernel
