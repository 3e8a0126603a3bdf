// runtime::DeviceBuffer: device memory that outlives a forward (kiln/runtime/runtime.h).
#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "driver.h"
#include "kiln/runtime/runtime.h"
#include "kiln/support/error.h"

namespace kiln::runtime {

DeviceBuffer::DeviceBuffer(int64_t bytes) : bytes_(bytes) {
  if (bytes < 0) userError("kiln runtime: a device buffer of {} bytes", bytes);
  if (std::string why = initDriver(); !why.empty()) userError("kiln runtime: no device buffer without a GPU: {}", why);
  CUdevice dev = 0;
  KILN_CU(cuDeviceGet, "", &dev, 0);
  CUcontext ctx = nullptr;
  KILN_CU(cuDevicePrimaryCtxRetain, "", &ctx, dev);
  context_ = ctx;
  KILN_CU(cuCtxSetCurrent, "", ctx);
  CUdeviceptr p = 0;
  KILN_CU(cuMemAlloc, fmt::format(" allocating a {}-byte device buffer", bytes), &p, static_cast<size_t>(std::max<int64_t>(bytes, 1)));
  device_ = p;
}

void DeviceBuffer::release() noexcept {
  if (!context_) return;
  const Driver& d = driver();
  d.fn_cuCtxSetCurrent(static_cast<CUcontext>(context_));
  if (device_) d.fn_cuMemFree(static_cast<CUdeviceptr>(device_));
  CUdevice dev = 0;
  if (d.fn_cuDeviceGet(&dev, 0) == CUDA_SUCCESS) d.fn_cuDevicePrimaryCtxRelease(dev);
  device_ = 0;
  context_ = nullptr;
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : device_(std::exchange(o.device_, 0)), bytes_(std::exchange(o.bytes_, 0)), context_(std::exchange(o.context_, nullptr)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    release();
    device_ = std::exchange(o.device_, 0);
    bytes_ = std::exchange(o.bytes_, 0);
    context_ = std::exchange(o.context_, nullptr);
  }
  return *this;
}

void DeviceBuffer::upload(const std::vector<std::byte>& bytes) {
  if (!context_) userError("kiln runtime: upload into an empty device buffer");
  if (static_cast<int64_t>(bytes.size()) != bytes_)
    userError("kiln runtime: {} bytes uploaded into a device buffer of {}", bytes.size(), bytes_);
  KILN_CU(cuCtxSetCurrent, "", static_cast<CUcontext>(context_));
  if (bytes_ > 0) KILN_CU(cuMemcpyHtoD, " uploading a device buffer", static_cast<CUdeviceptr>(device_), bytes.data(), bytes.size());
}

std::vector<std::byte> DeviceBuffer::download() const {
  std::vector<std::byte> out(static_cast<size_t>(bytes_));
  if (!context_) return out;
  KILN_CU(cuCtxSetCurrent, "", static_cast<CUcontext>(context_));
  if (bytes_ > 0) KILN_CU(cuMemcpyDtoH, " downloading a device buffer", out.data(), static_cast<CUdeviceptr>(device_), out.size());
  return out;
}

void DeviceBuffer::copyFrom(uint64_t device) {
  if (!context_ || bytes_ == 0) return;
  KILN_CU(cuCtxSetCurrent, "", static_cast<CUcontext>(context_));
  KILN_CU(cuMemcpyDtoD, " copying into a device buffer", static_cast<CUdeviceptr>(device_), static_cast<CUdeviceptr>(device),
          static_cast<size_t>(bytes_));
  KILN_CU(cuCtxSynchronize, " after copying into a device buffer");
}

void DeviceBuffer::copyTo(uint64_t device) const {
  if (!context_ || bytes_ == 0) return;
  KILN_CU(cuCtxSetCurrent, "", static_cast<CUcontext>(context_));
  KILN_CU(cuMemcpyDtoD, " copying out of a device buffer", static_cast<CUdeviceptr>(device), static_cast<CUdeviceptr>(device_),
          static_cast<size_t>(bytes_));
  KILN_CU(cuCtxSynchronize, " after copying out of a device buffer");
}

}  // namespace kiln::runtime
