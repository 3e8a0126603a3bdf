#include "kiln/support/hash.h"
#include "kiln/support/files.h"

#include <cstring>
#include <fstream>
#include <vector>

namespace kiln {

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ bytes[i]) * kFnvPrime;
  return h;
}

uint64_t fnv1aWords(uint64_t h, const void* data, size_t n) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes + i, 8);
    h = (h ^ w) * kFnvPrime;
  }
  for (; i < n; ++i) h = (h ^ bytes[i]) * kFnvPrime;
  return h;
}

bool hashFile(const std::string& path, uint64_t& hash, int64_t& bytes, uint64_t basis) {
  if (!notARegularFile(path).empty()) return false;  // a FIFO would block the read
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  hash = basis;
  bytes = 0;
  std::vector<char> chunk(1 << 20);
  while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0) {
    hash = fnv1aWords(hash, chunk.data(), static_cast<size_t>(in.gcount()));
    bytes += in.gcount();
  }
  return true;
}

}  // namespace kiln
