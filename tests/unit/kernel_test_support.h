// Helpers of the Kernel-IR tests written by hand (kernel_interpreter_test.cpp, kernel_warp_test.cpp).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "kiln/cuda/emitter.h"
#include "kiln/kernel/ir.h"
#include "kiln/loop/ir.h"
#include "kiln/support/error.h"
#include "test_support.h"

namespace kiln::kernel::kernel_test {

constexpr int kX = 0, kY = 1;  // buffer ids

inline loop::Buffer buffer(loop::Buffer::Kind kind, std::string name, int64_t n) {
  loop::Buffer b;
  b.kind = kind;
  b.name = std::move(name);
  b.dtype = DType::F32;
  b.shape = {n};
  return b;
}

// x: f32[n] input, y: f32[outN] output; one kernel reading x (param 0) and writing y (param 1).
inline Program program(int64_t n, int64_t outN, Kernel k) {
  Program p;
  p.modelName = "handwritten";
  p.buffers = {buffer(loop::Buffer::Kind::Input, "x", n), buffer(loop::Buffer::Kind::Output, "y", outN)};
  p.inputs = {kX};
  p.outputs = {kY};
  k.params = {Param{kX, "x", DType::F32, n, false}, Param{kY, "y", DType::F32, outN, true}};
  p.kernels.push_back(std::move(k));
  return p;
}

inline HostTensor ramp(int64_t n) {
  HostTensor t{DType::F32, {n}, {}};
  for (int64_t i = 0; i < n; ++i) t.values.push_back(std::sin(0.37f * static_cast<float>(i)) + 0.5f);
  return t;
}

inline std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const InternalError& e) {
    return e.what();
  }
  return "";
}

// nvcc compiles every kernel of `p` for sm_90a without an error or a warning.
inline void expectNvccCompiles(const Program& p) {
  test::TempDir tmp;
  try {
    cuda::writeArtifacts(p, cuda::emit(p), tmp.path / "artifacts", cuda::ArtifactOptions{"sm_90a", true});
  } catch (const UserError& e) {
    ADD_FAILURE() << e.what();
  }
}

}  // namespace kiln::kernel::kernel_test
