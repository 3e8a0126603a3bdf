// The compile cache of `kiln run`: compiled artifacts (manifest, cubins, weights) in one directory per model
// content, input overrides, --dtype, target arch and kiln build, under $KILN_CACHE_DIR (default
// ~/.cache/kiln). The key is computed from the command line and the model file alone, before anything is
// compiled, so a second run of the same model and shapes reads the manifest and compiles nothing.
#pragma once
#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

#include "kiln/support/pipeline.h"

namespace kiln {

// RunCacheKey::passChoices of a pipeline's --enable-pass and --disable-pass (kiln run's and kiln generate's entries).
std::vector<std::string> passChoicesOf(const PipelineOptions& p);

struct RunCacheKey {
  std::string modelPath;
  std::vector<std::string> inputOverrides;  // --input texts, in order (the recorded shapes are in the model file)
  std::string dtype;                        // --dtype, "" for none
  std::string arch;                         // "sm_90a"
  std::vector<std::string> passChoices;     // "+PASS" for --enable-pass, "-PASS" for --disable-pass, sorted
  std::string productShapes;                // the --product-shapes file's contents, "" for none
  bool greedyTokens = false;                // PipelineOptions::greedyTokens (kiln generate's entries)
};

// The cache root: $KILN_CACHE_DIR, else $HOME/.cache/kiln, else <tmp>/kiln-cache.
std::filesystem::path runCacheRoot();

// ROOT/<model file stem>-<16 hex digits>. The digits hash the model file's bytes (in chunks: a 1.1B-parameter
// archive is 4.4 GB), the key's other fields, kiln's version, the running kiln binary's path, size and
// modification time (a rebuilt compiler may emit different kernels under the same version number) and nvcc's.
// Not in the key: the LibTorch shared libraries kiln loads (an upgraded torch without a kiln rebuild) — clear
// the cache after changing them.
// Throws UserError when the model file cannot be read.
std::filesystem::path runCacheDir(const RunCacheKey& key);

// Whether `dir` holds a cache entry kiln run can use as it is: a manifest that reads and validates, and every file it
// lists with the size and hash kiln wrote (runtime::verifyFiles). False with `damage` empty when there is nothing
// there (or an empty directory); false with `damage` set to the one-line reason for an entry that is there but damaged
// (a truncated cubin, an edited weights file, a corrupt or missing manifest, a file in its place, a directory that lost
// its .kiln-output marker and more): the damaged entry is removed, so that kiln run says so once and compiles it again
// into a fresh directory (call it holding the entry's CacheEntryLock).
bool usableCacheEntry(const std::filesystem::path& dir, std::string* damage);

// An exclusive lock on a cache entry (flock(2) on the file DIR.lock beside it, created as needed), held while a kiln
// checks the entry and compiles into it: of two kilns running the same model at once, one compiles and the other waits
// (saying so on `log`, once), then finds the entry written and compiles nothing. Released when destroyed, or by the
// system when the process ends. Where the lock file cannot be made (a read-only cache), nothing is locked.
class CacheEntryLock {
 public:
  CacheEntryLock(const std::filesystem::path& dir, std::ostream& log);
  ~CacheEntryLock();
  CacheEntryLock(const CacheEntryLock&) = delete;
  CacheEntryLock& operator=(const CacheEntryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace kiln
