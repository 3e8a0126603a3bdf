// Moving a row kernel's stages into the kernels that read it: what loop-fuse-rows and loop-fuse-norm-products share
// (passes/loop/fuse_rows.cpp).
#pragma once
#include "kiln/loop/ir.h"

namespace kiln::loop {

// Consumer c takes producer prod's stages (their axes renamed apart, prod's first k parallel axes read as c's first k)
// ahead of its own, and every load of prod's buffer in c becomes prod's result with prod's axes from k on taken from
// that load's indices; c's accumulator references shift past the moved stages. Pre: prod's stages and result read
// prod's first k axes as the row, and c's first k axes span the same extents.
void moveStagesInto(Kernel& c, const Kernel& prod, int k);
// Two stages of k that compute the same reduction become one (softmax's max reaching a kernel twice).
void dedupeStages(Kernel& k);

}  // namespace kiln::loop
