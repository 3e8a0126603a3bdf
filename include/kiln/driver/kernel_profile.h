// `kiln run --bench N --profile`: where a forward's GPU time goes, kernel by kernel.
//
// The runtime times every kernel alone (runtime::Model::timeEachKernel); this groups the kernels that share code —
// the copies kernel-lower-from-tile made for identical decoder layers share one cubin and entry — and prints the
// groups by total time per forward, e.g.
//
//   kiln: kernel profile (each kernel alone, 20 launches back to back, hot L2), by total time per forward
//       #  kernel                 launches  us/launch  us/forward  share  grid x block       source
//       1  k1_matmul                     2      40.00        80.0  80.0%  256 x 128          k1_matmul.cu
//       2  k4_head                       1      16.00        16.0  16.0%  64 x 128           k4_head.cu
//     sum of the kernels: 0.100 ms per forward (the forward itself, kernels back to back: see the --bench line)
#pragma once
#include <string>
#include <vector>

#include "kiln/runtime/manifest.h"

namespace kiln {

// `msPerLaunch[i]` is kernel i's time (manifest order); `launches` how many launches each figure averages.
// At most `top` groups are listed; the rest are summed in one line.
std::string formatKernelProfile(const runtime::Manifest& m, const std::vector<double>& msPerLaunch, int launches, int top = 20);

}  // namespace kiln
