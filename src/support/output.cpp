#include "kiln/support/output.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "kiln/support/error.h"
#include "kiln/support/files.h"

namespace kiln {
namespace {

constexpr const char* kTmpTag = ".kiln-tmp-";

std::string errnoText(int err) { return std::strerror(err); }

std::string joinPath(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

std::string dirnameOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string basenameOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string stripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// PID-N: two runs never pick the same temporary name, and a leftover names the process that left it.
std::string uniqueSuffix() {
  static std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}-{}", ::getpid(), rng() % 1000000000);
}

// A temporary kiln names NAME.kiln-tmp-PID-N (or .kiln-tmp-PID-N); its PID, or -1 for any other name.
long tmpOwner(const std::string& name) {
  size_t at = name.rfind(kTmpTag);
  if (at == std::string::npos) return -1;
  std::string rest = name.substr(at + std::strlen(kTmpTag));
  size_t dash = rest.find('-');
  if (dash == std::string::npos || dash == 0 || dash + 1 == rest.size()) return -1;
  auto digits = [](const std::string& s) { return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }); };
  std::string pid = rest.substr(0, dash), n = rest.substr(dash + 1);
  if (!digits(pid) || !digits(n) || pid.size() > 9) return -1;
  return std::stol(pid);
}

// Any temporary of kiln's: NAME.kiln-tmp-PID-N, or NAME.kiln-tmp-N as kiln wrote them before the marker.
bool isKilnTmp(const std::string& name) {
  size_t at = name.rfind(kTmpTag);
  if (at == std::string::npos) return false;
  std::string rest = name.substr(at + std::strlen(kTmpTag));
  return tmpOwner(name) > 0 || (!rest.empty() && std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; }));
}

// A temporary of a kiln run that ended without cleaning up (killed): its process is gone.
bool isStaleTmp(const std::string& name) {
  long pid = tmpOwner(name);
  return pid > 0 && pid != ::getpid() && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

bool writeAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// `what` names the file in messages ("-o 'x'" or "'dir/.kiln-output'"). `old`: the file replaced, whose mode
// the new one keeps.
void replaceAtomically(const std::string& target, const std::string& text, const std::string& what, const struct stat* old) {
  std::string tmp = joinPath(dirnameOf(target), fmt::format(".{}{}{}", basenameOf(target), kTmpTag, uniqueSuffix()));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) userError("cannot write {}: {}; check the directory exists and is writable", what, errnoText(errno));
  bool ok = writeAll(fd, text);
  int err = errno;
  if (ok && old) (void)::fchmod(fd, old->st_mode & 07777);
  if (::close(fd) != 0 && ok) ok = false, err = errno;
  if (!ok) {
    ::unlink(tmp.c_str());
    userError("cannot write {}: {}; check the disk has space", what, errnoText(err));
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    userError("cannot write {}: {}", what, errnoText(err));
  }
}

// Writes into what is there (a FIFO, a device, a symlink's target), as a shell's `>` does.
void writeThrough(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOCTTY | O_CLOEXEC, 0666);
  if (fd < 0) userError("cannot write -o '{}': {}", path, errnoText(errno));
  bool ok = writeAll(fd, text);
  int err = errno;
  if (::close(fd) != 0 && ok) ok = false, err = errno;
  if (!ok) userError("cannot write -o '{}': {}", path, errnoText(err));
}

std::vector<std::string> listEntries(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) userError("cannot read the directory '{}' for -o: {}", dir, errnoText(errno));
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

bool isRegularFile(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The working directory is `dir` or lies below it (removing `dir` would pull the ground from under the user).
bool isCwdOrAncestor(const std::string& dir) {
  char* real = ::realpath(dir.c_str(), nullptr);
  char* cwd = ::getcwd(nullptr, 0);
  bool result = true;  // when in doubt, keep it
  if (real && cwd) {
    std::string d = real, c = cwd;
    result = d == "/" || c == d || c.rfind(d + "/", 0) == 0;
  }
  std::free(real);
  std::free(cwd);
  return result;
}

void writeMarker(const std::string& dir, const std::set<std::string>& names) {
  std::string text = fmt::format(
      "kiln-output {}\n# kiln wrote this directory. It replaces or removes only the files listed below and leaves every "
      "other file alone.\n",
      kMarkerFormat);
  for (auto& n : names) text += n + "\n";
  replaceAtomically(joinPath(dir, kMarkerFileName), text, fmt::format("'{}'", joinPath(dir, kMarkerFileName)), nullptr);
}

// Creates `dir` and its missing parents; returns those it created, outermost first.
std::vector<std::string> makeDirectories(const std::string& dir) {
  std::vector<std::string> created;
  size_t pos = dir[0] == '/' ? 1 : 0;
  for (;;) {
    size_t slash = dir.find('/', pos);
    std::string prefix = slash == std::string::npos ? dir : dir.substr(0, slash);
    if (!prefix.empty() && ::mkdir(prefix.c_str(), 0777) == 0) created.push_back(prefix);
    else if (!prefix.empty() && errno != EEXIST) userError("cannot create '{}' for -o: {}", prefix, errnoText(errno));
    if (slash == std::string::npos) break;
    pos = slash + 1;
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) userError("cannot create the directory '{}' for -o", dir);
  return created;
}

}  // namespace

void writeOutputFile(const std::string& path, const std::string& text) {
  if (path.empty()) usageError("-o needs a file name");
  if (path.back() == '/') userError("-o '{}' ends in '/': name a file", path);
  std::string what = fmt::format("-o '{}'", path);
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) userError("cannot write {}: {}", what, errnoText(errno));
    return replaceAtomically(path, text, what, nullptr);
  }
  if (S_ISLNK(st.st_mode)) {
    struct stat target;
    if (::stat(path.c_str(), &target) == 0) {
      if (S_ISDIR(target.st_mode)) userError("-o '{}' is a symlink to a directory; name a file", path);
      if (S_ISREG(target.st_mode)) {  // replace the file the link points to, keep the link
        char* real = ::realpath(path.c_str(), nullptr);
        if (!real) userError("cannot resolve the symlink -o '{}': {}", path, errnoText(errno));
        std::string resolved = real;
        std::free(real);
        return replaceAtomically(resolved, text, what, &target);
      }
    }
    return writeThrough(path, text);  // a FIFO or device behind the link, or a dangling link (creates its target)
  }
  if (S_ISREG(st.st_mode)) return replaceAtomically(path, text, what, &st);
  if (S_ISDIR(st.st_mode)) userError("-o '{}' is a directory; name a file", path);
  writeThrough(path, text);
}

std::set<std::string> readMarker(const std::string& dir, const std::string& flag) {
  std::set<std::string> names;
  std::string path = joinPath(dir, kMarkerFileName);
  if (std::string what = notARegularFile(path); !what.empty())
    userError("'{}' is {}, not a marker kiln wrote; remove it, or choose another {} directory", path, what, flag);
  std::ifstream in(path);
  if (!in) return names;
  std::string line;
  std::getline(in, line);
  int format = 0;
  if (line.rfind("kiln-output ", 0) != 0 || (format = std::atoi(line.c_str() + 12)) <= 0)
    userError("'{}' is not a marker kiln can read; remove it if this directory is kiln's output, or choose another {} directory",
              path, flag);
  if (format > kMarkerFormat)
    userError("{} '{}' was written by a newer kiln (output format {}, this kiln writes {}); use that kiln or another directory",
              flag, dir, format, kMarkerFormat);
  while (std::getline(in, line)) {
    bool plain = !line.empty() && line[0] != '#' && line != "." && line != ".." && line.find('/') == std::string::npos &&
                 line != kMarkerFileName;
    if (plain) names.insert(line);
  }
  return names;
}

OutputDir::OutputDir(const std::string& dir, std::string flag) : dir_(stripTrailingSlashes(dir)), flag_(std::move(flag)) {
  if (dir_.empty()) usageError("{} needs a directory name", flag_);
  struct stat st;
  if (::stat(dir_.c_str(), &st) != 0) {
    if (errno != ENOENT) userError("cannot use {} '{}': {}", flag_, dir_, errnoText(errno));
    created_ = makeDirectories(dir_);
  } else if (!S_ISDIR(st.st_mode)) {
    userError("{} '{}' exists and is not a directory; name a new or empty directory", flag_, dir_);
  }
  try {
    claim();
  } catch (...) {
    abandon();
    throw;
  }
}

void OutputDir::claim() {
  std::vector<std::string> entries = listEntries(dir_);
  bool marked = exists(joinPath(dir_, kMarkerFileName));
  if (marked) {
    readMarker(dir_, flag_);  // refuses a marker of a newer format before anything is written
  } else {
    bool empty = std::all_of(entries.begin(), entries.end(), isKilnTmp);  // kiln's leftovers do not count
    if (!empty)
      userError("{} '{}' is a non-empty directory that kiln did not write (it has no {}); name a new or empty directory",
                flag_, dir_, kMarkerFileName);
  }
  for (auto& n : entries)  // kiln's own leftovers of killed runs
    if (isStaleTmp(n)) removeTree(joinPath(dir_, n));
  if (!marked) writeMarker(dir_, {});
  staging_ = joinPath(dir_, kTmpTag + uniqueSuffix());
  if (::mkdir(staging_.c_str(), 0777) != 0)
    userError("cannot write into {} '{}': {}; check it is writable", flag_, dir_, errnoText(errno));
}

OutputDir::~OutputDir() {
  if (!committed_) abandon();
}

void OutputDir::abandon() noexcept {
  try {
    if (!staging_.empty()) removeTree(staging_);
    if (created_.empty() || isCwdOrAncestor(dir_)) return;
    // This run made the directory: take back what it put there (its files, the marker), then the empty
    // directories it created. rmdir never removes a directory something else has put a file into.
    for (auto& n : readMarker(dir_, flag_))
      if (isRegularFile(joinPath(dir_, n))) ::unlink(joinPath(dir_, n).c_str());
    ::unlink(joinPath(dir_, kMarkerFileName).c_str());
    for (auto it = created_.rbegin(); it != created_.rend(); ++it) ::rmdir(it->c_str());
  } catch (...) {
  }
}

void OutputDir::commit(const std::string& last) {
  std::vector<std::string> staged = listEntries(staging_);
  std::set<std::string> old = readMarker(dir_, flag_);  // read now: a concurrent run may have written since
  for (auto& n : staged) {
    KILN_ASSERT(n != kMarkerFileName && isRegularFile(joinPath(staging_, n)), "staged '{}' is not a plain file", n);
    if (exists(joinPath(dir_, n)) && !old.count(n))
      userError("{} '{}' holds '{}', which kiln did not write (its {} does not list it); move that file away or choose "
                "another directory",
                flag_, dir_, n, kMarkerFileName);
  }
  std::set<std::string> both = old;
  both.insert(staged.begin(), staged.end());
  writeMarker(dir_, both);  // a run killed from here on leaves only files its marker lists
  std::stable_partition(staged.begin(), staged.end(), [&](const std::string& n) { return n != last; });
  for (auto& n : staged)
    if (::rename(joinPath(staging_, n).c_str(), joinPath(dir_, n).c_str()) != 0)
      userError("cannot move '{}' into -o '{}': {}", n, dir_, errnoText(errno));
  std::set<std::string> fresh(staged.begin(), staged.end());
  for (auto& n : old)
    if (!fresh.count(n) && isRegularFile(joinPath(dir_, n))) ::unlink(joinPath(dir_, n).c_str());
  writeMarker(dir_, fresh);
  ::rmdir(staging_.c_str());
  committed_ = true;
}

}  // namespace kiln
