// TMA rules for the Kernel IR verifier (private to src/kernel): the tensor maps of a kernel, the static parts of a
// tmaLoad and the thread-block cluster (include/kiln/kernel/ir.h at tmaLoad, tmaLoadMulticast and TensorMap).
#pragma once
#include <string>

#include "kiln/kernel/ir.h"

namespace kiln::kernel::detail {

// "" when tensor map i of k is one the target can encode and copy: sm_90+, an existing parameter of a dtype TMA copies,
// the view inside it, offset and row stride 16-byte multiples, boxes of 1..256 a side whose rows are 16-byte multiples
// (128 bytes with the 128-byte swizzle); otherwise why not.
std::string checkTensorMap(const Kernel& k, const Target& target, size_t i);
// "" when tmaLoad s names an existing map, copies into a shared buffer of the map's dtype that holds the box and waits on
// a buffer of mbarriers; otherwise why not. The box's elements: boxElements(k, s).
std::string checkTmaLoad(const Kernel& k, const op::TmaLoad& s);
int64_t boxElements(const Kernel& k, const op::TmaLoad& s);
// "" when k's launch is one the target runs: its thread-block cluster (1, or 2..8 blocks dividing a one-dimensional
// grid, sm_90+; its cluster barriers and multicast copies have one) and a programmatic launch (sm_90+); otherwise why not.
std::string checkLaunch(const Kernel& k, const Target& target);
// The alignment tmaLoad's shared destination needs, in elements: 128 bytes, 1024 with the 128-byte swizzle.
int64_t tmaDestinationAlignment(const Kernel& k, const op::TmaLoad& s);

}  // namespace kiln::kernel::detail
