// Helpers for tests that run a real lmcfs mount (mount.lmcfs -f as a child
// process): start it and wait for the mount, unmount and reap the daemon.
// Header-only so that any test binary can include it.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

namespace lmc::testing {

// Runs a shell command; its exit status (128 if it did not exit).
inline int Shell(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

inline bool IsLmcfsMounted(const std::string& dir) {
  std::ifstream f("/proc/self/mounts");
  std::string line;
  while (std::getline(f, line))
    if (line.find(" " + dir + " fuse.lmcfs ") != std::string::npos) return true;
  return false;
}

// Starts `bin store mnt -f -o options` and waits up to 10 s for the mount.
// Returns the daemon's pid, or -1 after recording a test failure.
inline pid_t StartMount(const char* bin, const std::string& store, const std::string& mnt,
                        const std::string& options) {
  pid_t pid = fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork failed";
    return -1;
  }
  if (pid == 0) {
    execl(bin, bin, store.c_str(), mnt.c_str(), "-f", "-o", options.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 200; i++) {
    if (IsLmcfsMounted(mnt)) return pid;
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      ADD_FAILURE() << "mount.lmcfs exited with status " << status;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << "mount did not appear in 10 s";
  return pid;
}

// Unmounts (lazily) and waits up to 30 s for the daemon to exit 0 (it
// flushes and closes the store); kills it and records a failure otherwise.
inline void StopMount(const std::string& mnt, pid_t pid) {
  Shell("fusermount3 -u -z " + mnt + " 2>/dev/null");
  if (pid <= 0) return;
  for (int i = 0; i < 600; i++) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "daemon status " << status;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  ADD_FAILURE() << "daemon did not exit after unmount";
}

}  // namespace lmc::testing
