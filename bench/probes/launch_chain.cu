// What one dependent step of a forward costs when it does no work: a chain of K kernels that each wait for the one
// before, replayed from a CUDA graph, launched plainly or with programmatic dependent launch (kiln's
// kernel-overlap-launches: griddepcontrol.wait first, griddepcontrol.launch_dependents last), against one persistent
// kernel whose blocks meet K times at a grid barrier of their own (an acq_rel ticket on a counter, then a spin on a
// generation word: what a persistent design would put between two dependent operations). Also the last-block handover
// of kernel-finish-in-last-block: every block takes a ticket, the last runs a one-block step, then the chain goes on.
// The numbers decide issue 43's persistent design (docs/persistent.md): it can save at most (launch step - barrier step)
// per dependent operation. Build and run on the GPU machine:
//   nvcc -arch=sm_90a -O2 -o /tmp/launch_chain bench/probes/launch_chain.cu && /tmp/launch_chain
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#define CHECK(x)                                                                          \
  do {                                                                                    \
    cudaError_t e = (x);                                                                  \
    if (e != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

__device__ __forceinline__ unsigned ldAcquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// One step of the chain: block b's thread 0 adds to its own word (a store the next step could depend on).
__global__ void step(unsigned* words) {
  if (threadIdx.x == 0) words[blockIdx.x] += 1;
}

__global__ void stepOverlapped(unsigned* words) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x == 0) words[blockIdx.x] += 1;
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// The step with kernel-finish-in-last-block's handover: a ticket per block, the last one runs a one-block tail.
__global__ void stepWithTail(unsigned* words, unsigned* ticket, unsigned* tailWord) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x == 0) words[blockIdx.x] += 1;
  __shared__ unsigned held;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned before;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(ticket) : "memory");
    if (before + 1 == gridDim.x) *ticket = 0;
    held = before;
  }
  __syncthreads();
  if (held + 1 == gridDim.x && threadIdx.x == 0) *tailWord += 1;
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// K steps in one kernel, a grid barrier between them (every block resident: the caller checks occupancy).
__global__ void persistent(unsigned* words, unsigned* count, unsigned* generation, int steps) {
  for (int s = 0; s < steps; ++s) {
    if (threadIdx.x == 0) words[blockIdx.x] += 1;
    __syncthreads();
    if (threadIdx.x == 0) {
      const unsigned gen = ldAcquire(generation);
      unsigned before;
      asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(count) : "memory");
      if (before + 1 == gridDim.x) {
        *count = 0;
        asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(generation), "r"(gen + 1) : "memory");
      } else {
        while (ldAcquire(generation) == gen) {
        }
      }
    }
    __syncthreads();
  }
}

enum class How { Plain, Overlapped, WithTail };

// Microseconds per step of a graph of `steps` launches of `grid` blocks, replayed `replays` times.
double chainMicros(How how, int grid, int steps, int replays, unsigned* words, unsigned* ticket, unsigned* tailWord) {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(256);
  cfg.stream = s;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < steps; ++i) {
    if (how == How::Plain) step<<<grid, 256, 0, s>>>(words);
    if (how == How::Overlapped) CHECK(cudaLaunchKernelEx(&cfg, stepOverlapped, words));
    if (how == How::WithTail) CHECK(cudaLaunchKernelEx(&cfg, stepWithTail, words, ticket, tailWord));
  }
  CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  for (int w = 0; w < 3; ++w) CHECK(cudaGraphLaunch(exec, s));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  CHECK(cudaEventRecord(a, s));
  for (int r = 0; r < replays; ++r) CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaEventRecord(b, s));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaStreamDestroy(s));
  return 1000.0 * ms / (static_cast<double>(replays) * steps);
}

double persistentMicros(int grid, int steps, int replays, unsigned* words, unsigned* count, unsigned* generation) {
  persistent<<<grid, 256>>>(words, count, generation, steps);  // warm-up
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  CHECK(cudaEventRecord(a));
  for (int r = 0; r < replays; ++r) persistent<<<grid, 256>>>(words, count, generation, steps);
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  CHECK(cudaGetLastError());
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  return 1000.0 * ms / (static_cast<double>(replays) * steps);
}

int main() {
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  int perSm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, persistent, 256, 0));
  std::printf("%s, %d SMs, %d blocks of 256 threads resident an SM\n", prop.name, prop.multiProcessorCount, perSm);
  const int steps = 200, replays = 20;
  unsigned *words, *counters;
  CHECK(cudaMalloc(&words, 4096 * sizeof(unsigned)));
  CHECK(cudaMalloc(&counters, 4 * sizeof(unsigned)));
  CHECK(cudaMemset(words, 0, 4096 * sizeof(unsigned)));
  CHECK(cudaMemset(counters, 0, 4 * sizeof(unsigned)));
  std::printf("| grid | plain launches | overlapped launches | overlapped, last-block ticket | persistent, grid barrier |\n");
  std::printf("|---|---|---|---|---|\n");
  const std::vector<int> grids = {1, 8, prop.multiProcessorCount, 256, 2 * prop.multiProcessorCount, 704};
  for (int grid : grids) {
    const double plain = chainMicros(How::Plain, grid, steps, replays, words, counters, counters + 1);
    const double overlapped = chainMicros(How::Overlapped, grid, steps, replays, words, counters, counters + 1);
    const double tail = chainMicros(How::WithTail, grid, steps, replays, words, counters, counters + 1);
    const bool resident = grid <= perSm * prop.multiProcessorCount;
    const double barrier = resident ? persistentMicros(grid, steps, replays, words, counters + 2, counters + 3) : -1;
    std::printf("| %d | %.2f us | %.2f us | %.2f us | ", grid, plain, overlapped, tail);
    if (resident) std::printf("%.2f us |\n", barrier);
    else std::printf("(not resident at once) |\n");
  }
  std::printf("(microseconds per dependent step: %d steps a graph or kernel, %d replays after warm-up)\n", steps, replays);
  return 0;
}
