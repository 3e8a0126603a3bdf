/* What kiln's stub CUDA driver (tests/stub_cuda/stub_cuda.cpp) counts, for tests that load it in place of libcuda.so.1.
   A test finds these functions with dlsym on dlopen("libcuda.so.1", RTLD_NOLOAD) once the runtime has opened it. */
#ifndef KILN_STUB_CUDA_H
#define KILN_STUB_CUDA_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_stub_stats {
  uint64_t host_to_device_bytes, device_to_host_bytes, device_to_device_bytes; /* copies, sync and async */
  uint64_t allocations; /* cuMemAlloc calls */
  uint64_t live_bytes;  /* allocated and not freed (kept by kiln_stub_reset_stats) */
  uint64_t launches;    /* kernels run, directly or from a graph */
  uint64_t captures;    /* stream captures begun */
  uint64_t graph_launches;
} kiln_stub_stats;

const kiln_stub_stats* kiln_stub_get_stats(void);
void kiln_stub_reset_stats(void);
/* The pointer arguments of the last run of the stub kernel ENTRY (add: 3, copy: 2); returns how many (0: never run). */
size_t kiln_stub_last_params(const char* entry, uint64_t* params, size_t max);

#ifdef __cplusplus
}
#endif
#endif
