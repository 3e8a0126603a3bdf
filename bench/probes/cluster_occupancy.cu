// How many thread-block clusters of 1, 2, 4 and 8 blocks the GPU runs at once, for blocks of kiln's wgmma products
// (288 threads: two warpgroups and a producer warp) at several dynamic shared-memory sizes: what decides whether a
// one-wave grid of clusters fits (cudaOccupancyMaxActiveClusters). Build and run on the GPU machine:
//   nvcc -arch=sm_90a -O2 -o /tmp/cluster_occupancy bench/probes/cluster_occupancy.cu && /tmp/cluster_occupancy
#include <cuda_runtime.h>

#include <cstdio>

__global__ void productShaped(float* out) {
  extern __shared__ float slots[];
  slots[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  if (out) out[blockIdx.x] = slots[threadIdx.x ^ 1];
}

int main() {
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s: %d SMs, %zu B shared per block at most\n", prop.name, prop.multiProcessorCount, prop.sharedMemPerBlockOptin);
  cudaFuncSetAttribute(productShaped, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(prop.sharedMemPerBlockOptin));
  cudaFuncSetAttribute(productShaped, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  for (int shared : {64 << 10, 100 << 10, 150 << 10, 215 << 10}) {
    std::printf("dynamic shared %6d B:", shared);
    for (int cluster : {1, 2, 4, 8}) {
      cudaLaunchConfig_t config{};
      config.gridDim = dim3(cluster * 64, 1, 1);
      config.blockDim = dim3(288, 1, 1);
      config.dynamicSmemBytes = static_cast<size_t>(shared);
      cudaLaunchAttribute attribute{};
      attribute.id = cudaLaunchAttributeClusterDimension;
      attribute.val.clusterDim.x = cluster;
      attribute.val.clusterDim.y = 1;
      attribute.val.clusterDim.z = 1;
      config.attrs = &attribute;
      config.numAttrs = 1;
      int clusters = 0;
      const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, productShaped, &config);
      if (e != cudaSuccess) std::printf("  %d: %s", cluster, cudaGetErrorString(e));
      else std::printf("  clusters of %d: %3d (%3d blocks)", cluster, clusters, clusters * cluster);
    }
    std::printf("\n");
  }
  return 0;
}
