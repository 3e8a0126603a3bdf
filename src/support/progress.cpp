#include "kiln/support/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace kiln::progress {
namespace {

std::mutex lineMutex;
std::atomic<bool> disabled{false};
bool shown = false;  // guarded by lineMutex

size_t terminalWidth() {
  winsize w{};
  return ioctl(STDERR_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 10 ? w.ws_col : 80;
}

}  // namespace

bool enabled() {
  static const bool terminal = [] {
    const char* env = std::getenv("KILN_PROGRESS");
    return isatty(STDERR_FILENO) == 1 && !(env && std::strcmp(env, "0") == 0);
  }();
  return terminal && !disabled.load();
}

void disable() {
  clear();
  disabled = true;
}

void show(const std::string& text) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(lineMutex);
  std::string line = text.substr(0, terminalWidth() - 1);
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
  shown = true;
}

void clear() {
  std::lock_guard<std::mutex> lock(lineMutex);
  if (!shown) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  shown = false;
}

}  // namespace kiln::progress
