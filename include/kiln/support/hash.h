// Content hashes, not cryptographic. FNV-1a (64-bit) over bytes, with the FNV authors' offset basis and prime: what
// any FNV-1a tool computes (kiln run's output fingerprints). And kiln's file hash, FNV-1a's step taken over 8-byte
// little-endian words: eight times fewer multiplications, for gigabytes of weights (the run cache's key, the
// manifest's "files"); it is not FNV-1a, and no FNV tool reproduces it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

inline constexpr uint64_t kFnvOffsetBasis = 14695981039346656037ull;
inline constexpr uint64_t kFnvPrime = 1099511628211ull;
// The basis manifests of formats 2 to 5 hashed their files from: FNV's offset basis with a digit missing. Kept only to
// read those manifests (runtime::verifyFiles).
inline constexpr uint64_t kFormat5FileHashBasis = 1469598103934665603ull;

// FNV-1a over n bytes, continuing hash `h` (start from kFnvOffsetBasis).
uint64_t fnv1a(uint64_t h, const void* data, size_t n);
// FNV-1a's step over n bytes taken as 8-byte little-endian words, then the last bytes one by one, continuing `h`.
uint64_t fnv1aWords(uint64_t h, const void* data, size_t n);

// fnv1aWords of a whole file (read in 1 MiB chunks) from `basis`, and its size; false if it cannot be opened.
bool hashFile(const std::string& path, uint64_t& hash, int64_t& bytes, uint64_t basis = kFnvOffsetBasis);

}  // namespace kiln
