// kiln/support/process.h: posix_spawn with stdout and stderr into one pipe, read to its end.
#include "kiln/support/process.h"

#include <fmt/format.h>

#include <array>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kiln/support/error.h"

extern char** environ;

namespace kiln {

ProcessResult runProgram(const std::vector<std::string>& args, const std::string& dir, const std::string& hint) {
  std::vector<std::string> owned = args;
  std::vector<char*> argv;
  for (std::string& a : owned) argv.push_back(a.data());
  argv.push_back(nullptr);
  // O_CLOEXEC: programs started by other threads must not inherit this pipe, or its reader would wait for them too.
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) userError("cannot run {}: pipe: {}", args.at(0), std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  if (!dir.empty()) posix_spawn_file_actions_addchdir_np(&actions, dir.c_str());
  pid_t pid = 0;
  int err = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (err != 0) {
    close(fds[0]);
    userError("cannot run {} ({}); {}", args.at(0), std::strerror(err), hint);
  }
  ProcessResult r;
  std::array<char, 4096> chunk;
  for (;;) {
    ssize_t n = read(fds[0], chunk.data(), chunk.size());
    if (n > 0) r.output.append(chunk.data(), static_cast<size_t>(n));
    else if (n == 0 || errno != EINTR) break;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) r.exitStatus = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) r.exitStatus = 128 + WTERMSIG(status);
  return r;
}

}  // namespace kiln
