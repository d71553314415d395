// OpenNoLinks and friends: see no_links.h.
#include "no_links.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace lmc::store {
namespace {

// Closes a descriptor on scope exit, keeping errno.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
    }
  }
};

}  // namespace

// Every directory on the way is opened with O_PATH | O_DIRECTORY |
// O_NOFOLLOW from the previous one, so a link fails (ENOTDIR, turned into
// ELOOP) instead of being followed.
int OpenNoLinksByWalk(const std::string& path, int flags, mode_t mode) {
  int dir = ::open(!path.empty() && path[0] == '/' ? "/" : ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return -1;
  size_t pos = 0;
  for (;;) {
    while (pos < path.size() && path[pos] == '/') pos++;
    size_t end = path.find('/', pos);
    if (end == std::string::npos) end = path.size();
    size_t next = end;
    while (next < path.size() && path[next] == '/') next++;
    const bool last = next >= path.size();
    // "/" itself, or a trailing slash, name the directory reached so far.
    const std::string comp = end > pos ? path.substr(pos, end - pos) : std::string(".");
    FdCloser parent{dir};
    if (last) return ::openat(dir, comp.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
    const int sub = ::openat(dir, comp.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) {
      struct stat st;
      const int err = errno;
      errno =
          err == ENOTDIR && ::fstatat(dir, comp.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)
              ? ELOOP
              : err;
      return -1;
    }
    dir = sub;
    pos = next;
  }
}

int OpenNoLinks(const std::string& path, int flags, mode_t mode) {
  static std::atomic<bool> no_openat2{false};
  if (!no_openat2.load(std::memory_order_relaxed)) {
    open_how how{};
    how.flags = static_cast<uint64_t>(flags | O_NOFOLLOW | O_CLOEXEC);
    how.mode = (flags & O_CREAT) ? mode : 0;  // openat2 refuses a mode without O_CREAT
    how.resolve = RESOLVE_NO_SYMLINKS;
    const long fd = ::syscall(SYS_openat2, AT_FDCWD, path.c_str(), &how, sizeof how);
    if (fd >= 0 || errno != ENOSYS) return static_cast<int>(fd);
    no_openat2.store(true, std::memory_order_relaxed);
  }
  return OpenNoLinksByWalk(path, flags, mode);
}

int OpenParentNoLinks(const std::string& path, std::string* name) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) {
    *name = path;
    return OpenNoLinks(".", O_PATH | O_DIRECTORY);
  }
  *name = path.substr(slash + 1);
  return OpenNoLinks(slash == 0 ? "/" : path.substr(0, slash), O_PATH | O_DIRECTORY);
}

std::string FirstLinkOn(const std::string& path) {
  size_t pos = 0;
  while (pos < path.size()) {
    size_t end = path.find('/', pos + 1);
    if (end == std::string::npos) end = path.size();
    const std::string prefix = path.substr(0, end);
    struct stat st;
    if (!prefix.empty() && prefix != "/" && ::lstat(prefix.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
      return prefix;
    pos = end;
  }
  return "";
}

Status PathError(const std::string& what, const std::string& path) {
  const int err = errno;
  if (err == ELOOP || err == EEXIST || err == ENOTDIR) {
    const std::string link = FirstLinkOn(path);
    if (!link.empty())
      return Status::IOError(what + " " + path + ": " + (link == path ? "it" : link) +
                             " is a symbolic link, and lmcfs never follows links inside its store "
                             "(docs/ARCHITECTURE.md, \"Store permissions\"); remove it" +
                             (link == path ? "" : ", or put the directory it points to in its place"));
  }
  return Status::FromErrno(err, what + " " + path);
}

}  // namespace lmc::store
