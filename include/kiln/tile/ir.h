// Tile IR: the GPU schedule of each kernel (DESIGN.md §1). The computation is the Loop-IR kernel; the
// schedule says how its axes map onto the grid, blocks and threads. Every choice is a named knob the
// autotuner can set later.
//
//   thread_per_output   parallel axes flattened onto blockIdx.x*block + threadIdx.x; each thread runs the
//                       whole reduction for its output serially         knobs: block
//   block_per_row       one block per row of a staged kernel (per output point for a plain reduction);
//                       its threads stride over each stage's (flattened) reduction axes, combine partial
//                       results by a shared-memory tree, then stride over the row's outputs   knobs: threads
#pragma once
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "kiln/loop/ir.h"

namespace kiln::tile {

enum class Strategy { ThreadPerOutput, BlockPerRow };
const char* strategyName(Strategy s);

struct Schedule {
  Strategy strategy = Strategy::ThreadPerOutput;
  std::map<std::string, int64_t> knobs;  // "block" (threads per block), "threads" (block_per_output)
  int64_t knob(const std::string& name) const;
};

struct Program {
  loop::Program loop;                // buffers and kernels' computations
  std::vector<Schedule> schedules;   // one per loop kernel
};

std::string print(const Program& p);
nlohmann::json toJson(const Program& p);
void verify(const Program& p);

// Passes
Program lowerFromLoop(const loop::Program& p);  // tile-lower-from-loop
bool cooperativeReduce(Program& p);             // tile-cooperative-reduce

// Reductions at least this long get a block per row (see cooperative_reduce.cpp).
constexpr int64_t kCooperativeReduceMinExtent = 64;
// ... and only while there are fewer outputs than this (about 16 resident warps on each of 132 SMs x 8).
constexpr int64_t kCooperativeReduceMaxOutputs = 16384;

}  // namespace kiln::tile
