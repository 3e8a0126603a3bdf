// Kernel IR's mbarriers by hand: a producer warp copies a slice by cp.async and arrives on an mbarrier when its copies
// land (cp.async.mbarrier.arrive), a consumer warp waits for the phase and reads the slice: warp roles without a
// block barrier between them. The interpreter's rules (a wait that program order never satisfies, a read without the
// wait, an unpublished or doubled initialisation), the verifier's, the printed and emitted forms and nvcc; and a named
// barrier among the consumer warps only (the verifier tries every thread against the conditions around it).
#include <gtest/gtest.h>

#include "kernel_test_support.h"

namespace kiln::kernel {
namespace {

using namespace kernel_test;

constexpr int64_t kSlice = 64;  // floats per block: 32 producer lanes copy 2 each

enum class Fault { None, ConsumerFirst, NoWait, NoPublish, InitTwice, WrongParity };

// Two warps per block. Thread 0 initialises barrier 0 of `bars` for 32 arrivals; a block barrier publishes it. Warp 0
// (the producer) copies x[64 b .. 64 b + 63] into `slice` (8 bytes a lane) and arrives when its copies land; warp 1
// (the consumer) waits for phase 0 and writes y = 2 * slice.
Program producerConsumer(Fault fault = Fault::None) {
  Kernel k;
  k.name = "k_roles";
  k.block = {64, 1, 1};
  k.grid = {2, 1, 1};
  SharedBuffer bars{"bars", 1};
  bars.mbarriers = true;
  k.shared = {SharedBuffer{"slice", kSlice}, bars};
  const int kWarp = 2, kLane = 3;
  Idx warp = idxVar(kWarp, "warp"), lane = idxVar(kLane, "lane");
  Block init{mbarrierInit(1, idxConst(0), 32)};
  if (fault == Fault::InitTwice) init.push_back(mbarrierInit(1, idxConst(0), 32));
  k.body.push_back(ifLess(threadIdx(), idxConst(1), init));
  if (fault != Fault::NoPublish) k.body.push_back(barrier());
  k.body.push_back(defIdx(kWarp, "warp", floorDiv(threadIdx(), 32)));
  k.body.push_back(defIdx(kLane, "lane", mod(threadIdx(), 32)));
  const Idx at = lane * idxConst(2), from = blockIdx() * idxConst(kSlice) + lane * idxConst(2);
  Stmt producer = ifLess(warp, idxConst(1), {cpAsync(0, at, kX, from, 8), cpAsyncMbarrierArrive(1, idxConst(0))});
  Block consume;
  if (fault != Fault::NoWait) consume.push_back(mbarrierWait(1, idxConst(0), idxConst(fault == Fault::WrongParity ? 1 : 0)));
  for (int e = 0; e < 2; ++e)
    consume.push_back(storeGlobal(kY, from + idxConst(e), fapply(Fn::Mul, {loadShared(0, at + idxConst(e)), fconst(2.f)})));
  Stmt consumer = ifLess(idxConst(0), warp, consume);
  if (fault == Fault::ConsumerFirst) {
    k.body.push_back(consumer);
    k.body.push_back(producer);
  } else {
    k.body.push_back(producer);
    k.body.push_back(consumer);
  }
  return program(2 * kSlice, 2 * kSlice, std::move(k));
}

TEST(KernelMbarrier, ProducerWarpFeedsConsumerWarp) {
  Program p = producerConsumer();
  verify(p);
  HostTensor x = ramp(2 * kSlice);
  auto out = interpret(p, {x});
  for (int64_t i = 0; i < 2 * kSlice; ++i) ASSERT_FLOAT_EQ(out[0].values[i], 2 * x.values[i]) << i;
  std::string text = print(p);
  EXPECT_NE(text.find("  shared bars: mbarrier[1]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("mbarrier.init bars[0], 32 arrivals"), std::string::npos) << text;
  EXPECT_NE(text.find("cp.async.mbarrier.arrive bars[0]"), std::string::npos) << text;
  EXPECT_NE(text.find("mbarrier.wait bars[0] parity 0"), std::string::npos) << text;
  std::string cu = cuda::emit(p).sources[0].text;
  EXPECT_NE(cu.find("__shared__ __align__(8) unsigned long long bars[1];  // mbarriers"), std::string::npos) << cu;
  EXPECT_NE(cu.find("kiln::cp_async_mbarrier_arrive(&bars[0]);"), std::string::npos) << cu;
  EXPECT_NE(cu.find("kiln::mbarrier_wait(&bars[0], 0);"), std::string::npos) << cu;
  EXPECT_EQ(p.kernels[0].sharedBytes(), kSlice * 4 + 8);
  expectNvccCompiles(p);  // sm_90a
  test::TempDir tmp;        // and sm_80, the first target with mbarriers
  p.target = targetFor("sm_80");
  EXPECT_NO_THROW(cuda::writeArtifacts(p, cuda::emit(p), tmp.path / "artifacts", cuda::ArtifactOptions{"sm_80", true}));
}

TEST(KernelMbarrier, InterpreterRules) {
  HostTensor x = ramp(2 * kSlice);
  std::string msg = errorOf([&] { interpret(producerConsumer(Fault::ConsumerFirst), {x}); });
  EXPECT_NE(msg.find("kernel k_roles: thread 32 of block 0 waits for the phase of parity 0 of mbarrier bars[0], which has not "
                     "completed: its 32 remaining arrival(s) come later in program order or never (it would wait forever)"),
            std::string::npos) << msg;
  msg = errorOf([&] { interpret(producerConsumer(Fault::WrongParity), {x}); });
  EXPECT_NE(msg.find("waits for the phase of parity 1 of mbarrier bars[0], which has not completed"), std::string::npos) << msg;
  msg = errorOf([&] { interpret(producerConsumer(Fault::NoWait), {x}); });
  EXPECT_NE(msg.find("kernel k_roles: thread 32 of block 0 reads shared slice[0], whose cp.async arrives on phase 0 of mbarrier "
                     "bars[0], which it has not waited for"), std::string::npos) << msg;
  msg = errorOf([&] { interpret(producerConsumer(Fault::NoPublish), {x}); });
  EXPECT_NE(msg.find("thread 1 of block 0: cp.async.mbarrier.arrive of mbarrier bars[0] before a block barrier published thread "
                     "0's initialisation"), std::string::npos) << msg;
  msg = errorOf([&] { interpret(producerConsumer(Fault::InitTwice), {x}); });
  EXPECT_NE(msg.find("initialises mbarrier bars[0] a second time"), std::string::npos) << msg;
  // Unverified programs too: the interpreter never treats a barrier object as a float.
  Program p = producerConsumer();
  p.kernels[0].body.push_back(storeGlobal(kY, idxConst(0), loadShared(1, idxConst(0))));
  msg = errorOf([&] { interpret(p, {x}); });
  EXPECT_NE(msg.find("kernel k_roles: thread 0 of block 0 reads mbarrier bars[0] as a float"), std::string::npos) << msg;
  p = producerConsumer();
  p.kernels[0].body.push_back(storeShared(1, idxConst(0), fconst(1.f)));
  msg = errorOf([&] { interpret(p, {x}); });
  EXPECT_NE(msg.find("writes mbarrier bars[0] as a float"), std::string::npos) << msg;
}

TEST(KernelMbarrier, VerifierRules) {
  // Warp roles: per-thread mbarrier statements under thread-dependent branches verify; a block barrier there does not.
  Program p = producerConsumer();
  EXPECT_NO_THROW(verify(p));
  p.kernels[0].body.push_back(ifLess(idxVar(2, "warp"), idxConst(1), {barrier()}));
  EXPECT_NE(errorOf([&] { verify(p); }).find("barrier under thread-dependent control flow `if (warp < 1)`"), std::string::npos);
  p = producerConsumer();
  p.kernels[0].body.push_back(storeGlobal(kY, idxConst(0), loadShared(1, idxConst(0))));
  std::string msg = errorOf([&] { verify(p); });
  EXPECT_NE(msg.find("load of shared bars: mbarriers are touched only by mbarrier statements"), std::string::npos) << msg;
  p = producerConsumer();
  p.kernels[0].body.push_back(mbarrierArrive(0, idxConst(0)));
  msg = errorOf([&] { verify(p); });
  EXPECT_NE(msg.find("mbarrier of shared slice: not mbarriers"), std::string::npos) << msg;
  p = producerConsumer();
  p.kernels[0].body.push_back(mbarrierWait(1, idxConst(1), idxConst(0)));
  msg = errorOf([&] { verify(p); });
  EXPECT_NE(msg.find("mbarrier shared bars[1] indexes [1, 1], outside the buffer's 1 elements"), std::string::npos) << msg;
  p = producerConsumer();
  p.kernels[0].body.push_back(mbarrierWait(1, idxConst(0), idxConst(2)));
  msg = errorOf([&] { verify(p); });
  EXPECT_NE(msg.find("mbarrier.wait for parity 2 in [2, 2] (want 0 or 1)"), std::string::npos) << msg;
  p = producerConsumer();
  p.kernels[0].body.push_back(mbarrierInit(1, idxConst(0), 65));
  msg = errorOf([&] { verify(p); });
  EXPECT_NE(msg.find("mbarrier.init with 65 arrivals per phase in a block of 64 threads"), std::string::npos) << msg;
  p = producerConsumer();
  p.kernels[0].shared[1].dynamic = true;  // a dynamic buffer of mbarriers takes 8 bytes each
  p.kernels[0].dynamicSharedBytes = 4;
  msg = errorOf([&] { verify(p); });
  EXPECT_NE(msg.find("dynamic shared buffers need 8 bytes but the kernel launches with 4"), std::string::npos) << msg;
  EXPECT_THROW(mbarrierInit(1, idxConst(0), 0), InternalError);
}

// Three warps: warp 0 produces as above; warps 1 and 2 consume, each writing half of a shared scratch slice that the
// other half's warp reads after a named barrier of the two consumer warps (64 threads): y[i] = 2 x[i] + 2 x[63 - i].
Program consumerGroup(Idx role = nullptr, int64_t groupThreads = 64) {
  Kernel k;
  k.name = "k_group";
  k.block = {96, 1, 1};
  SharedBuffer bars{"bars", 1};
  bars.mbarriers = true;
  k.shared = {SharedBuffer{"slice", kSlice}, bars, SharedBuffer{"scratch", kSlice}};
  const int kWarp = 2, kLane = 3, kC = 4;
  Idx warp = idxVar(kWarp, "warp"), lane = idxVar(kLane, "lane"), c = idxVar(kC, "c");
  k.body.push_back(ifLess(threadIdx(), idxConst(1), {mbarrierInit(1, idxConst(0), 32)}));
  k.body.push_back(barrier());
  k.body.push_back(defIdx(kWarp, "warp", floorDiv(threadIdx(), 32)));
  k.body.push_back(defIdx(kLane, "lane", mod(threadIdx(), 32)));
  k.body.push_back(ifLess(warp, idxConst(1), {cpAsync(0, lane * idxConst(2), kX, lane * idxConst(2), 8), cpAsyncMbarrierArrive(1, idxConst(0))}));
  Block consume{mbarrierWait(1, idxConst(0), idxConst(0)), defIdx(kC, "c", mod(threadIdx(), kSlice)),
                storeShared(2, c, fapply(Fn::Mul, {loadShared(0, c), fconst(2.f)})), namedBarrier(1, groupThreads),
                storeGlobal(kY, c, fapply(Fn::Add, {loadShared(2, c), loadShared(2, idxConst(kSlice - 1) + idxMul(c, -1))}))};
  k.body.push_back(ifLess(role ? role : idxConst(0), role ? idxConst(1) : warp, consume));
  return program(kSlice, kSlice, std::move(k));
}

TEST(KernelMbarrier, NamedBarrierOfOneWarpRole) {
  Program p = consumerGroup();
  verify(p);
  HostTensor x = ramp(kSlice);
  auto out = interpret(p, {x});
  for (int64_t i = 0; i < kSlice; ++i) ASSERT_FLOAT_EQ(out[0].values[i], 2 * x.values[i] + 2 * x.values[kSlice - 1 - i]) << i;
  EXPECT_NE(print(p).find("barrier 1 of 64 threads"), std::string::npos) << print(p);
  EXPECT_NE(cuda::emit(p).sources[0].text.find("kiln::named_barrier<1, 64>();"), std::string::npos);
  expectNvccCompiles(p);
  // The group the conditions leave must be the one the barrier names, in whole warps, from threadIdx alone.
  std::string msg = errorOf([&] { verify(consumerGroup(nullptr, 96)); });
  EXPECT_NE(msg.find("named barrier 1 of 96 threads: 64 threads reach it, not the 96 it names"), std::string::npos) << msg;
  msg = errorOf([&] { interpret(consumerGroup(nullptr, 96), {x}); });
  EXPECT_NE(msg.find("kernel k_group: barrier 1 of 96 threads reached by 64 (block 0)"), std::string::npos) << msg;
  msg = errorOf([&] { verify(consumerGroup(idxConst(48) + idxMul(threadIdx(), -1))); });  // threads 48..: half of warp 1
  EXPECT_NE(msg.find("16 of the 32 lanes of warp 1 reach it (a warp role is whole warps)"), std::string::npos) << msg;
  msg = errorOf([&] { verify(consumerGroup(idxConst(32) + idxMul(threadIdx(), -1) + blockIdx())); });
  EXPECT_NE(msg.find("reads more than threadIdx.x"), std::string::npos) << msg;
  EXPECT_THROW(namedBarrier(0, 64), InternalError);
  EXPECT_THROW(namedBarrier(1, 48), InternalError);
}

}  // namespace
}  // namespace kiln::kernel
