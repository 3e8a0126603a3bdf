// The Driver API table and its errors (driver.h).
#include "driver.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>

#include "kiln/runtime/runtime.h"
#include "kiln/support/error.h"

namespace kiln::runtime {

const Driver& driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      d.error = "no CUDA driver (libcuda.so.1) on this machine";
      return;
    }
    // The handle is deliberately never closed: other code in the process (LibTorch) may share the driver.
#define KILN_RESOLVE(f)                                                                                        \
  if (d.error.empty()) {                                                                                       \
    d.fn_##f = reinterpret_cast<decltype(d.fn_##f)>(dlsym(lib, KILN_STR(f)));                                  \
    if (!d.fn_##f) d.error = fmt::format("the CUDA driver lacks '{}'; it is older than the CUDA {}.{} headers kiln was built with", \
                                         KILN_STR(f), CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);          \
  }
    KILN_CU_FUNCTIONS(KILN_RESOLVE)
#undef KILN_RESOLVE
  });
  return d;
}

std::string cuErrorText(CUresult r) {
  const Driver& d = driver();
  const char* name = nullptr;
  const char* str = nullptr;
  if (d.fn_cuGetErrorName) d.fn_cuGetErrorName(r, &name);
  if (d.fn_cuGetErrorString) d.fn_cuGetErrorString(r, &str);
  return fmt::format("{} ({})", name ? name : fmt::format("CUresult {}", static_cast<int>(r)),
                     str ? str : "unknown error");
}

void check(CUresult r, const char* call, const std::string& where) {
  if (r != CUDA_SUCCESS) fail(ErrorCode::Driver, "kiln runtime: {} failed{}: {}", call, where, cuErrorText(r));
}

std::string initDriver() {
  const Driver& d = driver();
  if (!d.error.empty()) return d.error;
  if (CUresult r = d.fn_cuInit(0); r != CUDA_SUCCESS) return "cuInit failed: " + cuErrorText(r);
  int n = 0;
  if (CUresult r = d.fn_cuDeviceGetCount(&n); r != CUDA_SUCCESS) return "cuDeviceGetCount failed: " + cuErrorText(r);
  if (n == 0) return "the CUDA driver reports no devices";
  return {};
}

}  // namespace kiln::runtime
