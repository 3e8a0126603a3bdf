#include "kiln/driver/run_cache.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "kiln/cuda/emitter.h"
#include "kiln/runtime/manifest.h"
#include "kiln/support/error.h"

namespace kiln {
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ull, kFnvPrime = 1099511628211ull;

uint64_t hashBytes(uint64_t h, const char* data, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {  // FNV-1a over 64-bit words: fast enough for gigabytes
    uint64_t w;
    std::memcpy(&w, data + i, 8);
    h = (h ^ w) * kFnvPrime;
  }
  for (; i < n; ++i) h = (h ^ static_cast<unsigned char>(data[i])) * kFnvPrime;
  return h;
}

uint64_t hashFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) userError("cannot read model '{}'; check the path", path);
  uint64_t h = kFnvOffset;
  std::vector<char> chunk(1 << 20);
  while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0)
    h = hashBytes(h, chunk.data(), static_cast<size_t>(in.gcount()));
  return h;
}

}  // namespace

fs::path runCacheRoot() {
  if (const char* env = std::getenv("KILN_CACHE_DIR"); env && *env) return env;
  if (const char* home = std::getenv("HOME"); home && *home) return fs::path(home) / ".cache" / "kiln";
  return fs::temp_directory_path() / "kiln-cache";
}

fs::path runCacheDir(const RunCacheKey& key) {
  std::string text = fmt::format("{:016x}", hashFile(key.modelPath));
  for (auto& o : key.inputOverrides) text += "|input " + o;
  text += fmt::format("|dtype {}|arch {}|kiln {}", key.dtype, key.arch, KILN_VERSION);
  for (auto& p : key.passChoices) text += "|pass " + p;
  text += "|nvcc " + cuda::nvccIdentity();
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec)
    text += fmt::format("|{}|{}|{}", self.string(), fs::file_size(self, ec),
                        fs::last_write_time(self, ec).time_since_epoch().count());
  uint64_t h = hashBytes(kFnvOffset, text.data(), text.size());
  return runCacheRoot() / fmt::format("{}-{:016x}", fs::path(key.modelPath).stem().string(), h);
}

bool usableCacheEntry(const fs::path& dir, std::string* damage) {
  damage->clear();
  std::error_code ec;
  if (!fs::exists(dir / runtime::kManifestFileName, ec)) return false;
  try {
    runtime::verifyFiles(runtime::readManifest(dir), dir);
    return true;
  } catch (const UserError& e) {
    *damage = e.what();
    return false;
  }
}

}  // namespace kiln
