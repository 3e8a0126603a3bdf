#include "kiln/driver/run_cache.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <ostream>

#include "kiln/cuda/emitter.h"
#include "kiln/runtime/manifest.h"
#include "kiln/support/error.h"
#include "kiln/support/files.h"
#include "kiln/support/hash.h"

namespace kiln {

std::vector<std::string> passChoicesOf(const PipelineOptions& p) {
  std::vector<std::string> choices;  // each set is sorted
  for (const std::string& n : p.enable) choices.push_back("+" + n);
  for (const std::string& n : p.disable) choices.push_back("-" + n);
  return choices;
}

namespace fs = std::filesystem;

namespace {

uint64_t hashModel(const std::string& path) {
  uint64_t h = 0;
  int64_t bytes = 0;
  if (!hashFile(path, h, bytes)) userError("cannot read model '{}'; check the path", path);
  return h;
}

}  // namespace

fs::path runCacheRoot() {
  if (const char* env = std::getenv("KILN_CACHE_DIR"); env && *env) return env;
  if (const char* home = std::getenv("HOME"); home && *home) return fs::path(home) / ".cache" / "kiln";
  return fs::temp_directory_path() / "kiln-cache";
}

fs::path runCacheDir(const RunCacheKey& key) {
  std::string text = fmt::format("{:016x}", hashModel(key.modelPath));
  for (auto& o : key.inputOverrides) text += "|input " + o;
  text += fmt::format("|dtype {}|arch {}|kiln {}", key.dtype, key.arch, KILN_VERSION);
  for (auto& p : key.passChoices) text += "|pass " + p;
  if (!key.productShapes.empty()) text += "|shapes " + key.productShapes;
  if (key.greedyTokens) text += "|greedy tokens";
  text += "|nvcc " + cuda::nvccIdentity();
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec)
    text += fmt::format("|{}|{}|{}", self.string(), fs::file_size(self, ec),
                        fs::last_write_time(self, ec).time_since_epoch().count());
  uint64_t h = fnv1aWords(kFnvOffsetBasis, text.data(), text.size());
  return runCacheRoot() / fmt::format("{}-{:016x}", fs::path(key.modelPath).stem().string(), h);
}

bool usableCacheEntry(const fs::path& dir, std::string* damage) {
  damage->clear();
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(dir, ec);
  if (ec || !fs::exists(status)) return false;  // nothing cached yet
  if (fs::is_directory(status) && fs::is_empty(dir, ec)) return false;
  if (!fs::is_directory(status)) {
    *damage = "it is not a directory";
  } else if (!fs::exists(dir / runtime::kManifestFileName, ec)) {
    *damage = "it has no manifest.json";
  } else {
    try {
      runtime::verifyFiles(runtime::readManifest(dir), dir);
      return true;
    } catch (const UserError& e) {
      *damage = e.what();
    }
  }
  // kiln's own entry, checked under its lock: removed whole (its marker, if it lost it, with it) and written again.
  removeTree(dir.string());
  return false;
}

CacheEntryLock::CacheEntryLock(const fs::path& dir, std::ostream& log) {
  std::error_code ec;
  fs::create_directories(dir.parent_path(), ec);
  fd_ = ::open((dir.string() + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) return;
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  log << fmt::format("kiln: waiting for another kiln compiling into the cache {}\n", dir.string()) << std::flush;
  while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
  }
}

CacheEntryLock::~CacheEntryLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the only descriptor of the open file releases its lock
}

}  // namespace kiln
