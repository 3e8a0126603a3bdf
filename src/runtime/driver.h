// The CUDA Driver API as the runtime calls it (internal to src/runtime): libcuda opened at run time and each function
// resolved once per process, so that kiln and the installed runtime link against no CUDA library.
#pragma once
#include <cuda.h>

#include <string>

namespace kiln::runtime {

// cuda.h #defines many API names to versioned symbols (cuMemAlloc -> cuMemAlloc_v2). Stringifying through a second
// macro expands them first, so dlsym asks for the symbol the prototype actually describes, never the legacy ABI.
#define KILN_STR2(x) #x
#define KILN_STR(x) KILN_STR2(x)

#define KILN_CU_FUNCTIONS(X)                                                                                   \
  X(cuInit) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute)                   \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxSynchronize)           \
  X(cuModuleLoadData) X(cuModuleGetFunction) X(cuModuleUnload) X(cuFuncSetAttribute) X(cuMemAlloc)          \
  X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemsetD8) X(cuLaunchKernel) X(cuGetErrorName)            \
  X(cuGetErrorString) X(cuEventCreate) X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime)          \
  X(cuEventDestroy) X(cuMemcpyDtoD) X(cuMemGetInfo) X(cuStreamCreate) X(cuStreamDestroy)                     \
  X(cuStreamSynchronize) X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiate) X(cuGraphLaunch) \
  X(cuGraphExecDestroy) X(cuGraphDestroy) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync) \
  X(cuDriverGetVersion) X(cuTensorMapEncodeTiled) X(cuLaunchKernelEx)

// The Driver API, resolved once per process. Members are named fn_<unversioned name>; their types come from the
// (versioned) prototypes in cuda.h.
struct Driver {
#define KILN_DECL(f) decltype(&::f) fn_##f = nullptr;
  KILN_CU_FUNCTIONS(KILN_DECL)
#undef KILN_DECL
  std::string error;  // non-empty: the driver is unusable, and this says why
};

// The driver, resolved on first use (its `error` says why it is unusable, if it is).
const Driver& driver();
// A CUresult as "NAME (description)".
std::string cuErrorText(CUresult r);
// Throws UserError "kiln runtime: CALL failed WHERE: ERROR" unless r is CUDA_SUCCESS; `where` completes the sentence
// "<call> failed...", e.g. " for kernel 'k3_softmax'".
void check(CUresult r, const char* call, const std::string& where = {});
// Calls the Driver API through the table and names the call (unversioned) in any error.
#define KILN_CU(f, where, ...) check(driver().fn_##f(__VA_ARGS__), #f, where)

// Initialises the driver; returns an empty string on success, otherwise why the GPU can't be used.
std::string initDriver();

}  // namespace kiln::runtime
