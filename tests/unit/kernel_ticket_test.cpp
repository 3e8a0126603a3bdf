// kernel::blockTicket by hand: blocks meeting at a counter, the last of them adding what the others stored (how a split
// product's last block per tile added its partials in the removed tile-last-block-sums; no lowering emits it now);
// kernel::counterRelease / counterAwait, one block
// handing a partial to another (stream-K); the verifier's rules, the interpreter, the printer and nvcc.
#include <gtest/gtest.h>

#include "kernel_test_support.h"

namespace kiln::kernel {
namespace {

using namespace kernel_test;

constexpr int kParts = 3, kTiles = 2, kThreads = 64;
constexpr int kPartials = 2, kCounters = 3;  // buffer ids after x and y

// Block b (tile b mod 2, part b / 2) stores x[b][t] + 1 into partials[b][t]; the last of a tile's 3 blocks to take its
// ticket writes y[tile][t] = the sum of the tile's partials, in part order. `counterParam` the ticket's parameter.
Program meetAtCounters(int counterParam = 3) {
  Kernel k;
  k.name = "k_meet";
  k.grid = {kParts * kTiles, 1, 1};
  k.block = {kThreads, 1, 1};
  const Idx t = threadIdx(), tile = idxVar(2, "tile"), ticket = idxVar(3, "ticket");
  k.body.push_back(defIdx(2, "tile", mod(blockIdx(), kTiles)));
  k.body.push_back(storeGlobal(kPartials, blockIdx() * idxConst(kThreads) + t,
                               fapply(Fn::Add, {loadGlobal(kX, blockIdx() * idxConst(kThreads) + t), fconst(1.f)})));
  k.body.push_back(blockTicket(3, "ticket", counterParam, tile, kParts));
  FE sum;
  for (int part = 0; part < kParts; ++part) {
    FE p = loadGlobal(kPartials, (tile + idxConst(part * kTiles)) * idxConst(kThreads) + t);
    sum = sum ? fapply(Fn::Add, {sum, p}) : p;
  }
  k.body.push_back(ifLess(idxConst(kParts - 2), ticket, {storeGlobal(kY, tile * idxConst(kThreads) + t, sum)}));
  Program p = program(kParts * kTiles * kThreads, kTiles * kThreads, std::move(k));
  p.buffers.push_back(kernel_test::buffer(loop::Buffer::Kind::Temp, "partials", kParts * kTiles * kThreads));
  loop::Buffer counters = kernel_test::buffer(loop::Buffer::Kind::Counters, "tickets", kTiles);
  counters.dtype = DType::I64;
  p.buffers.push_back(counters);
  Kernel& kk = p.kernels[0];
  kk.params.push_back(Param{kPartials, "partials", DType::F32, kParts * kTiles * kThreads, true});
  kk.params.push_back(Param{kCounters, "tickets", DType::I64, kTiles, true});
  return p;
}

TEST(BlockTicket, TheLastBlockOfEachTileAddsWhatTheOthersStored) {
  Program p = meetAtCounters();
  verify(p);
  HostTensor x = ramp(kParts * kTiles * kThreads);
  auto out = interpret(p, {x});
  ASSERT_EQ(out[0].values.size(), static_cast<size_t>(kTiles * kThreads));
  for (int tile = 0; tile < kTiles; ++tile)
    for (int t = 0; t < kThreads; ++t) {
      float want = 0.f;
      for (int part = 0; part < kParts; ++part) want += x.values[static_cast<size_t>((tile + part * kTiles) * kThreads + t)] + 1.f;
      EXPECT_EQ(out[0].values[static_cast<size_t>(tile * kThreads + t)], want) << "tile " << tile << " thread " << t;
    }
  EXPECT_NE(print(p).find("ticket = ticket tickets[tile] of 3"), std::string::npos) << print(p);
}

// The counters are back at zero after every launch: the same kernel twice in one program meets again.
TEST(BlockTicket, CountersAreZeroAgainForTheNextLaunch) {
  Program p = meetAtCounters();
  p.kernels.push_back(p.kernels[0]);
  verify(p);
  HostTensor x = ramp(kParts * kTiles * kThreads);
  auto twice = interpret(p, {x});
  p.kernels.pop_back();
  EXPECT_EQ(interpret(p, {x})[0].values, twice[0].values);
}

TEST(BlockTicket, VerifierWantsEveryThreadAndACountersBuffer) {
  Program divergent = meetAtCounters();
  Block& body = divergent.kernels[0].body;
  Stmt ticket = body[2];
  body[2] = ifLess(threadIdx(), idxConst(32), {ticket});
  EXPECT_NE(errorOf([&] { verify(divergent); }).find("ticket ticket under thread-dependent control flow"), std::string::npos);
  EXPECT_NE(errorOf([&] { interpret(divergent, {ramp(kParts * kTiles * kThreads)}); }).find("taken by 32 of 64 threads"),
            std::string::npos);

  Program partials = meetAtCounters(/*counterParam=*/2);  // the partials: f32 temp, not counters
  EXPECT_NE(errorOf([&] { verify(partials); }).find("tickets are taken at a written i64 buffer of kind counters"),
            std::string::npos);

  Program outside = meetAtCounters();
  outside.kernels[0].body[2].as<op::BlockTicket>().counter.index = blockIdx();  // 6 blocks, 2 counters
  EXPECT_NE(errorOf([&] { verify(outside); }).find("not provably within the 2 counters of tickets"), std::string::npos);
}

TEST(BlockTicket, EmitsOneAtomicPerBlockAndCompiles) {
  Program p = meetAtCounters();
  const std::string cu = cuda::emit(p).sources.at(0).text;
  EXPECT_NE(cu.find("ticket_held = kiln::ticket(reinterpret_cast<unsigned long long*>(&"), std::string::npos) << cu;
  EXPECT_NE(cu.find("]), 3ull);"), std::string::npos) << cu;
  expectNvccCompiles(p);
}

// kernel::counterRelease / counterAwait by hand (how a stream-K product's walks hand partial tiles to the walk that
// finishes each tile): block 0 of each pair stores x + 1 and releases its pair's counter; block 1 waits for the count of
// 1 and writes y = its x plus what block 0 stored. The interpreter runs blocks in order, so the wait finds its count;
// were the roles swapped (the waiting block first), the wait is an error that says why.
Program handOver(bool waiterFirst = false) {
  Kernel k;
  k.name = "k_hand_over";
  k.grid = {2 * kTiles, 1, 1};
  k.block = {kThreads, 1, 1};
  const Idx t = threadIdx(), pair = idxVar(2, "pair"), role = idxVar(3, "role");
  k.body.push_back(defIdx(2, "pair", floorDiv(blockIdx(), 2)));
  k.body.push_back(defIdx(3, "role", waiterFirst ? idxConst(1) + idxMul(mod(blockIdx(), 2), -1) : mod(blockIdx(), 2)));
  Block give, take;
  give.push_back(storeGlobal(kPartials, pair * idxConst(kThreads) + t,
                             fapply(Fn::Add, {loadGlobal(kX, blockIdx() * idxConst(kThreads) + t), fconst(1.f)})));
  give.push_back(barrier());
  give.push_back(ifLess(t, idxConst(1), {counterRelease(3, pair)}));
  take.push_back(ifLess(t, idxConst(1), {counterAwait(3, pair, idxConst(1))}));
  take.push_back(barrier());
  take.push_back(storeGlobal(kY, pair * idxConst(kThreads) + t,
                             fapply(Fn::Add, {loadGlobal(kX, blockIdx() * idxConst(kThreads) + t),
                                              loadGlobal(kPartials, pair * idxConst(kThreads) + t)})));
  k.body.push_back(ifLess(role, idxConst(1), std::move(give)));
  k.body.push_back(ifLess(idxConst(0), role, std::move(take)));
  Program p = program(2 * kTiles * kThreads, kTiles * kThreads, std::move(k));
  p.buffers.push_back(kernel_test::buffer(loop::Buffer::Kind::Temp, "partials", kTiles * kThreads));
  loop::Buffer counters = kernel_test::buffer(loop::Buffer::Kind::Counters, "counters", kTiles);
  counters.dtype = DType::I64;
  p.buffers.push_back(counters);
  Kernel& kk = p.kernels[0];
  kk.params.push_back(Param{kPartials, "partials", DType::F32, kTiles * kThreads, true});
  kk.params.push_back(Param{kCounters, "counters", DType::I64, kTiles, true});
  return p;
}

TEST(CounterHandOver, TheWaitingBlockReadsWhatTheReleasingOneStored) {
  Program p = handOver();
  p.kernels.push_back(p.kernels[0]);  // twice: the wait sets the counter back to zero for the next launch
  verify(p);
  HostTensor x = ramp(2 * kTiles * kThreads);
  auto out = interpret(p, {x});
  for (int pair = 0; pair < kTiles; ++pair)
    for (int t = 0; t < kThreads; ++t)
      EXPECT_EQ(out[0].values[static_cast<size_t>(pair * kThreads + t)],
                x.values[static_cast<size_t>((2 * pair + 1) * kThreads + t)] + (x.values[static_cast<size_t>(2 * pair * kThreads + t)] + 1.f));
  EXPECT_NE(print(p).find("counter.await counters[pair] == 1, then 0"), std::string::npos) << print(p);
  const std::string cu = cuda::emit(p).sources.at(0).text;
  EXPECT_NE(cu.find("kiln::counter_release(reinterpret_cast<unsigned long long*>(&"), std::string::npos) << cu;
  EXPECT_NE(cu.find("kiln::counter_await(reinterpret_cast<unsigned long long*>(&"), std::string::npos) << cu;
  expectNvccCompiles(p);
}

TEST(CounterHandOver, AWaitBeforeItsReleasesAndAWrongBufferAreErrors) {
  Program early = handOver(/*waiterFirst=*/true);
  verify(early);
  const std::string msg = errorOf([&] { interpret(early, {ramp(2 * kTiles * kThreads)}); });
  EXPECT_NE(msg.find("waits for counter counters[0] to hold 1, and it holds 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("must come earlier in grid order"), std::string::npos) << msg;
  Program partials = handOver();
  partials.kernels[0].body[2].body[2].body[0].as<op::CounterRelease>().counter.param = 2;  // release on the f32 partials
  EXPECT_NE(errorOf([&] { verify(partials); }).find("counters are a written i64 buffer of kind counters"), std::string::npos);
}

}  // namespace
}  // namespace kiln::kernel
