// The CUDA building blocks in templates/*.cuh, embedded at build time (CMakeLists.txt) so emitted code
// never depends on where the source tree is.
#pragma once
#include <vector>

namespace kiln::cuda {

struct Template {
  const char* name;  // file name, e.g. "kiln_ops.cuh"
  const char* text;
};
const std::vector<Template>& templates();

}  // namespace kiln::cuda
