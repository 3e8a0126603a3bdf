// Which SM each block of a one-wave grid lands on, for grids shaped like kiln's causal flash attention at 512 tokens
// (128 threads, 87,040 B of dynamic shared memory: two blocks an SM): does a GPU deal blocks b and b + SMs to the same
// SM, as tile-interleave-attention-rows's comment supposes? Each block records %smid and spins long enough that every
// block of the grid is resident at once. Prints, per grid size and launch, how many of the first SMs blocks sit on
// distinct SMs, how many pairs (b, b + SMs) share an SM, and the largest number of key steps an SM gets (8 query blocks
// a head, weights 1..8) given the placement observed, under kiln's rows-inner order and under a "dealt" order that
// would pair each of the first SMs blocks with a complementary one at b + SMs if the GPU placed them together.
// Result (bench/results/2026-12-04-h200-block-placement.txt): it does not. Build and run on the GPU machine:
//   nvcc -arch=sm_90a -O2 -o /tmp/block_placement bench/probes/block_placement.cu && /tmp/block_placement
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

__global__ void attentionShaped(int* smOfBlock, long long spinNs) {
    long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  while (now - start < spinNs);
  __syncthreads();
  if (threadIdx.x == 0) {
    int sm = 0;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    smOfBlock[blockIdx.x] = sm;
  }
}

// Query block of grid block b: rows inner, heaviest half first then the lightest (kiln's rowsInner order).
static int rowsInnerBlock(int b, int rows, int qBlocks) {
  const int pb = b / rows, heavy = (qBlocks + 1) / 2;
  return pb < heavy ? qBlocks - 1 - pb : pb - heavy;
}

// Query block of grid block b under the dealt order: heaviest first list i -> qb = QB - 1 - i / R; blocks b < M take
// L[S - M + b], blocks M <= b < S the loners L[b - M], blocks S + j the partner L[N - 1 - j] (M = N - S).
static int dealtBlock(int b, int rows, int qBlocks, int sms) {
  const int n = rows * qBlocks, m = n - sms;
  const int i = b < m ? sms - m + b : b < sms ? b - m : n - 1 - (b - sms);
  return qBlocks - 1 - i / rows;
}

int main() {
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const int sms = prop.multiProcessorCount, shared = 87040, qBlocks = 8;
  std::printf("%s: %d SMs\n", prop.name, sms);
  cudaFuncSetAttribute(attentionShaped, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
  int* smOfBlock = nullptr;
  cudaMalloc(&smOfBlock, 4096 * sizeof(int));
  for (int rows : {28, 32}) {
    const int n = rows * qBlocks;
    for (int launch = 0; launch < 3; ++launch) {
      attentionShaped<<<n, 128, shared>>>(smOfBlock, 20000);
      std::vector<int> sm(static_cast<size_t>(n));
      cudaMemcpy(sm.data(), smOfBlock, n * sizeof(int), cudaMemcpyDeviceToHost);
      if (cudaGetLastError() != cudaSuccess) return std::printf("launch failed\n"), 1;
      std::vector<int> firstWave(sm.begin(), sm.begin() + std::min(n, sms));
      std::sort(firstWave.begin(), firstWave.end());
      const int distinct = static_cast<int>(std::unique(firstWave.begin(), firstWave.end()) - firstWave.begin());
      int pairsShared = 0;
      for (int b = 0; b + sms < n; ++b) pairsShared += sm[b] == sm[b + sms];
      std::vector<int> inner(4096, 0), dealt(4096, 0);
      for (int b = 0; b < n; ++b) {
        inner[sm[b]] += rowsInnerBlock(b, rows, qBlocks) + 1;
        dealt[sm[b]] += dealtBlock(b, rows, qBlocks, sms) + 1;
      }
      std::printf("%d heads x %d query blocks (%d blocks), launch %d: first %d blocks on %d SMs; %d of %d pairs (b, b + %d) "
                  "share an SM; most key steps an SM: rows inner %d, dealt %d (mean %.2f)\n",
                  rows, qBlocks, n, launch, std::min(n, sms), distinct, pairsShared, std::max(0, n - sms), sms,
                  *std::max_element(inner.begin(), inner.end()), *std::max_element(dealt.begin(), dealt.end()),
                  rows * qBlocks * (qBlocks + 1) / 2.0 / sms);
    }
  }
  cudaFree(smOfBlock);
  return 0;
}
