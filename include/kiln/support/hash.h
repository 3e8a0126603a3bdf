// The content hash kiln uses for files it checks (the run cache's key, the manifest's "files"): FNV-1a over 8-byte
// little-endian words, then the last bytes one by one — fast enough for gigabytes of weights, not cryptographic.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

inline constexpr uint64_t kFnvOffset = 1469598103934665603ull;

// Continues hash `h` over n bytes.
uint64_t fnv1aWords(uint64_t h, const void* data, size_t n);

// The hash of a whole file (read in 1 MiB chunks) and its size; false if it cannot be opened.
bool hashFile(const std::string& path, uint64_t& hash, int64_t& bytes);

}  // namespace kiln
