// The POSIX Env: pread/pwrite/fdatasync on file descriptors, flock locks.
// Files are created 0600 and directories 0700 (whatever the umask leaves of
// that), and no operation follows a symbolic link in any component of its
// path: files and directories are opened with OpenNoLinks, and creations,
// removals and renames act on a name inside a directory opened that way
// (docs/ARCHITECTURE.md, "Store permissions").
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "lmc/store/env.h"
#include "lmc/store/permissions.h"
#include "no_links.h"

namespace lmc::store {
namespace {

Status Errno(const std::string& what, const std::string& path) {
  return Status::FromErrno(errno, what + " " + path);
}

class PosixFile final : public File {
 public:
  PosixFile(int fd, std::string path, uint64_t size) : fd_(fd), path_(std::move(path)), size_(size) {}
  ~PosixFile() override {
    if (direct_fd_ >= 0) ::close(direct_fd_);
    if (direct_read_fd_ >= 0) ::close(direct_read_fd_);
    ::close(fd_);
  }

  // A second descriptor (/proc/self/fd, no path lookup) with O_DIRECT,
  // opened on first use; 0 where the filesystem refuses it.
  size_t DirectReadAlign() const override {
    std::call_once(direct_read_once_, [this] {
      const std::string self = "/proc/self/fd/" + std::to_string(fd_);
      direct_read_fd_ = ::open(self.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    });
    return direct_read_fd_ >= 0 ? kAlign : 0;
  }

  Result<size_t> ReadDirect(uint64_t off, size_t n, uint8_t* dst) const override {
    if (DirectReadAlign() == 0) return ReadAt(off, n, dst);
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pread(direct_read_fd_, dst + done, n - done, static_cast<off_t>(off + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        if (errno == EINVAL && done == 0) return ReadAt(off, n, dst);  // refused for this range
        return Errno("pread (O_DIRECT)", path_);
      }
      if (r == 0) break;
      done += static_cast<size_t>(r);
      if (done % kAlign != 0) break;  // the end of the file, inside a block
    }
    return done;
  }

  Result<size_t> ReadAt(uint64_t off, size_t n, uint8_t* dst) const override {
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pread(fd_, dst + done, n - done, static_cast<off_t>(off + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return Errno("pread", path_);
      }
      if (r == 0) break;
      done += static_cast<size_t>(r);
    }
    return done;
  }

  Status Append(const uint8_t* p, size_t n) override {
    tail_end_ = kNoTail;
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pwrite(fd_, p + done, n - done, static_cast<off_t>(size_.load()));
      if (r < 0) {
        if (errno == EINTR) continue;
        return Errno("pwrite", path_);
      }
      done += static_cast<size_t>(r);
      size_.fetch_add(static_cast<uint64_t>(r));
    }
    return Status::Ok();
  }

  // Large appends bypass the page cache (O_DIRECT on a second descriptor
  // of the same file): the device reads the bytes from one staging copy in
  // user memory instead of the kernel copying them into fresh page-cache
  // pages, which was the largest single cost of a commit (docs/BENCHMARKS.md,
  // "Filesystem"). Where O_DIRECT is refused, and for small appends,
  // buffered pwritev.
  Status AppendV(std::span<const std::span<const uint8_t>> pieces) override {
    size_t total = 0;
    for (const auto& p : pieces) total += p.size();
    if (total >= kDirectMin && OpenDirect()) {
      Status st = AppendDirect(pieces, total);
      if (st.ok() || direct_fd_ >= 0) return st;
      // O_DIRECT refused at the first write (EINVAL): buffered from now on.
    }
    return AppendBuffered(pieces);
  }

  Status Sync() override {
    if (::fdatasync(fd_) != 0) return Errno("fdatasync", path_);
    return Status::Ok();
  }

  Status Truncate(uint64_t size) override {
    tail_end_ = kNoTail;
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) return Errno("ftruncate", path_);
    size_.store(size);
    return Status::Ok();
  }

  uint64_t Size() const override { return size_.load(); }

 private:
  static constexpr size_t kDirectMin = 256 << 10;  // smaller appends stay buffered
  static constexpr size_t kAlign = 4096;           // a multiple of every logical block size
  static constexpr size_t kStaging = 8 << 20;      // bytes per direct write

  // pwritev in runs of at most IOV_MAX pieces; a short write resumes
  // inside the piece it stopped in.
  Status AppendBuffered(std::span<const std::span<const uint8_t>> pieces) {
    tail_end_ = kNoTail;
    std::vector<iovec> iov;
    size_t i = 0, skip = 0;  // first piece not fully written, bytes of it written
    while (i < pieces.size()) {
      iov.clear();
      for (size_t j = i; j < pieces.size() && iov.size() < IOV_MAX; j++) {
        const size_t off = j == i ? skip : 0;
        if (pieces[j].size() == off) continue;
        iov.push_back({const_cast<uint8_t*>(pieces[j].data()) + off, pieces[j].size() - off});
      }
      if (iov.empty()) break;
      ssize_t r = ::pwritev(fd_, iov.data(), static_cast<int>(iov.size()), static_cast<off_t>(size_.load()));
      if (r < 0) {
        if (errno == EINTR) continue;
        return Errno("pwritev", path_);
      }
      size_.fetch_add(static_cast<uint64_t>(r));
      auto left = static_cast<size_t>(r);
      while (i < pieces.size() && left >= pieces[i].size() - skip) {
        left -= pieces[i].size() - skip;
        skip = 0;
        i++;
      }
      skip += left;
    }
    return Status::Ok();
  }

  // The direct descriptor, opened once: the same file reopened through
  // /proc/self/fd (no path lookup) with O_DIRECT; false when refused.
  bool OpenDirect() {
    if (direct_tried_) return direct_fd_ >= 0;
    direct_tried_ = true;
    const std::string self = "/proc/self/fd/" + std::to_string(fd_);
    direct_fd_ = ::open(self.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);
    return direct_fd_ >= 0;
  }

  // Writes the pieces after the current end in aligned blocks from the
  // staging buffer: the first block starts with the bytes already in the
  // file's last partial block (kept from the previous append, else read
  // back), the last is padded with zeros, and the file is cut back to its
  // true size afterwards (so a crash can leave only zeros past the
  // committed size, which Recover cuts). Committed bytes rewritten in the
  // first block are the same bytes. On EINVAL before anything was written
  // (the filesystem refuses O_DIRECT) the direct descriptor is dropped and
  // the caller writes buffered.
  Status AppendDirect(std::span<const std::span<const uint8_t>> pieces, size_t total) {
    std::lock_guard lk(StagingMutex());
    uint8_t* stage = Staging();
    const uint64_t start = size_.load();
    uint64_t block = start & ~uint64_t{kAlign - 1};  // file offset of stage[0]
    size_t head = start - block;                     // committed bytes at the front of stage
    if (head) {
      if (tail_end_ == start && tail_.size() == head) {
        std::memcpy(stage, tail_.data(), head);
      } else {
        auto r = ReadAt(block, head, stage);
        if (!r.ok()) return r.status();
        if (*r != head) return Status::IOError("pack " + path_ + " is shorter than its recorded size");
      }
    }
    size_t fill = head;  // bytes in stage
    uint64_t written = 0;
    auto flush = [&](bool last) -> Status {
      size_t n = last ? (fill + kAlign - 1) & ~(kAlign - 1) : fill & ~(kAlign - 1);
      if (n > fill) std::memset(stage + fill, 0, n - fill);
      size_t done = 0;
      while (done < n) {
        ssize_t r = ::pwrite(direct_fd_, stage + done, n - done, static_cast<off_t>(block + done));
        if (r < 0) {
          if (errno == EINTR) continue;
          if (errno == EINVAL && written == 0 && done == 0) {
            ::close(direct_fd_);
            direct_fd_ = -1;
            return Status::InvalidArgument("O_DIRECT refused");
          }
          return Errno("pwrite (O_DIRECT)", path_);
        }
        if (r == 0) return Status::IOError("pwrite (O_DIRECT) of " + path_ + " wrote nothing");
        done += static_cast<size_t>(r);
      }
      const size_t keep = last ? 0 : fill - n;  // a partial block carried to the next write
      written += n;
      if (last) {
        const size_t tail = fill & (kAlign - 1);
        tail_.assign(stage + (fill - tail), stage + fill);
      } else {
        std::memmove(stage, stage + n, keep);
      }
      block += n;
      fill = keep;
      return Status::Ok();
    };
    for (const auto& p : pieces) {
      size_t off = 0;
      while (off < p.size()) {
        const size_t n = std::min(p.size() - off, kStaging - fill);
        std::memcpy(stage + fill, p.data() + off, n);
        fill += n;
        off += n;
        if (fill == kStaging) LMC_RETURN_IF_ERROR(flush(false));
      }
    }
    LMC_RETURN_IF_ERROR(flush(true));
    const uint64_t end = start + total;
    tail_end_ = end;
    if (end % kAlign != 0 && ::ftruncate(fd_, static_cast<off_t>(end)) != 0) return Errno("ftruncate", path_);
    size_.store(end);
    return Status::Ok();
  }

  // One staging buffer for the process (appends to packs are serialized by
  // the store's commit lock; the mutex covers several stores).
  static std::mutex& StagingMutex() {
    static std::mutex m;
    return m;
  }
  static uint8_t* Staging() {
    static uint8_t* buf = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kStaging));
    return buf;
  }

  int fd_;
  std::string path_;
  std::atomic<uint64_t> size_;
  bool direct_tried_ = false;
  int direct_fd_ = -1;
  mutable std::once_flag direct_read_once_;
  mutable int direct_read_fd_ = -1;
  static constexpr uint64_t kNoTail = ~uint64_t{0};
  // The bytes of the file's last partial block as the last direct append
  // left them, valid while the file still ends at tail_end_ and nothing
  // else was written or cut since (kNoTail: read them back).
  std::vector<uint8_t> tail_;
  uint64_t tail_end_ = kNoTail;
};

class PosixLock final : public FileLock {
 public:
  explicit PosixLock(int fd) : fd_(fd) {}
  ~PosixLock() override {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }

 private:
  int fd_;
};

class PosixEnv final : public Env {
 public:
  Result<uint64_t> FileDiskBytes(const std::string& path) override {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) return Status::NotFound("no file " + path);
      return Errno("stat", path);
    }
    return static_cast<uint64_t>(st.st_blocks) * 512;
  }

  Status SpaceOf(const std::string& dir, uint64_t* total, uint64_t* avail) override {
    struct statvfs st;
    if (::statvfs(dir.c_str(), &st) != 0) return Errno("statvfs", dir);
    *total = uint64_t{st.f_blocks} * st.f_frsize;
    *avail = uint64_t{st.f_bavail} * st.f_frsize;
    return Status::Ok();
  }

  Status PunchHole(const std::string& path, uint64_t off, uint64_t len) override {
    if (len == 0) return Status::Ok();
    const int fd = OpenNoLinks(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return Status::NotFound("no file " + path);
      return PathError("open", path);
    }
    Status s;
    if (::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(off),
                    static_cast<off_t>(len)) != 0) {
      if (errno == EOPNOTSUPP || errno == ENOSYS)
        s = Status::Unsupported("the filesystem of " + path + " cannot punch holes");
      else
        s = Errno("fallocate (punch hole)", path);
    }
    ::close(fd);
    return s;
  }

  Result<std::unique_ptr<File>> OpenFile(const std::string& path, OpenMode mode) override {
    int flags = O_CLOEXEC;
    switch (mode) {
      case OpenMode::kRead:
        flags |= O_RDONLY;
        break;
      case OpenMode::kReadWrite:
        flags |= O_RDWR;
        break;
      case OpenMode::kCreate:
        flags |= O_RDWR | O_CREAT | O_EXCL;
        break;
    }
    int fd = OpenNoLinks(path, flags, kStoreFileMode);
    if (fd < 0) {
      if (errno == ENOENT) return Status::NotFound("no file " + path);
      return PathError("open", path);
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      Status s = Errno("fstat", path);
      ::close(fd);
      return s;
    }
    return std::unique_ptr<File>(new PosixFile(fd, path, static_cast<uint64_t>(st.st_size)));
  }

  // An existing directory is fine; an existing link (to a directory or
  // not) is refused.
  Status CreateDir(const std::string& path) override {
    std::string name;
    const int dir = OpenParentNoLinks(path, &name);
    if (dir < 0) return PathError("mkdir", path);
    Status s;
    struct stat st;
    if (::mkdirat(dir, name.c_str(), kStoreDirMode) != 0) {
      const int err = errno;
      if (err != EEXIST || ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
          !S_ISDIR(st.st_mode)) {
        errno = err;
        s = PathError("mkdir", path);
      }
    }
    ::close(dir);
    return s;
  }

  Status SyncDir(const std::string& path) override {
    int fd = OpenNoLinks(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return PathError("open directory", path);
    Status s;
    if (::fsync(fd) != 0) s = Errno("fsync directory", path);
    ::close(fd);
    return s;
  }

  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    const int fd = OpenNoLinks(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0) {
      if (errno == ENOENT) return Status::NotFound("no directory " + path);
      return PathError("open directory", path);
    }
    DIR* d = ::fdopendir(fd);
    if (!d) {
      Status s = Errno("fdopendir", path);
      ::close(fd);
      return s;
    }
    std::vector<std::string> names;
    while (struct dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(std::move(n));
    }
    ::closedir(d);
    return names;
  }

  // lstat: a symbolic link exists (even dangling), so callers that remove a
  // stale file remove the link rather than create through it.
  bool FileExists(const std::string& path) override {
    struct stat st;
    return ::lstat(path.c_str(), &st) == 0;
  }

  // Removes the name (a link itself, never its target).
  Status DeleteFile(const std::string& path) override {
    std::string name;
    const int dir = OpenParentNoLinks(path, &name);
    if (dir < 0) return PathError("unlink", path);
    Status s;
    if (::unlinkat(dir, name.c_str(), 0) != 0) s = PathError("unlink", path);
    ::close(dir);
    return s;
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    std::string from_name, to_name;
    const int from_dir = OpenParentNoLinks(from, &from_name);
    if (from_dir < 0) return PathError("rename", from);
    const int to_dir = OpenParentNoLinks(to, &to_name);
    Status s;
    if (to_dir < 0)
      s = PathError("rename " + from + " to", to);
    else if (::renameat(from_dir, from_name.c_str(), to_dir, to_name.c_str()) != 0)
      s = PathError("rename " + from + " to", to);
    ::close(from_dir);
    if (to_dir >= 0) ::close(to_dir);
    return s;
  }

  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override {
    int fd = OpenNoLinks(path, O_RDWR | O_CREAT, kStoreFileMode);
    if (fd < 0) return PathError("open lock file", path);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK)
        return Status::Busy("store is in use: another process (or another Store in this one) holds " + path);
      errno = err;
      return Errno("flock", path);
    }
    return std::unique_ptr<FileLock>(new PosixLock(fd));
  }
};

}  // namespace

Status File::AppendV(std::span<const std::span<const uint8_t>> pieces) {
  for (const auto& p : pieces) LMC_RETURN_IF_ERROR(Append(p.data(), p.size()));
  return Status::Ok();
}

Result<uint64_t> Env::DiskBytes(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) {
    if (errno == ENOENT) return Status::NotFound("no directory " + dir);
    return Errno("opendir", dir);
  }
  uint64_t n = 0;
  std::vector<std::string> subdirs;
  while (struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (::fstatat(::dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone
    if (S_ISREG(st.st_mode)) n += static_cast<uint64_t>(st.st_blocks) * 512;
    if (S_ISDIR(st.st_mode)) subdirs.push_back(dir + "/" + name);
  }
  ::closedir(d);
  for (const std::string& sub : subdirs) {
    auto r = DiskBytes(sub);
    if (r.ok()) n += *r;
  }
  return n;
}

Result<uint64_t> Env::FileDiskBytes(const std::string& path) {
  LMC_ASSIGN_OR_RETURN(std::unique_ptr<File> f, OpenFile(path, OpenMode::kRead));
  return f->Size();
}

Status Env::PunchHole(const std::string& path, uint64_t, uint64_t) {
  return Status::Unsupported("this store's Env cannot punch holes in " + path);
}

Status Env::PunchHoles(const std::string& path, std::span<const Range> ranges, size_t* done) {
  *done = 0;
  for (const Range& r : ranges) {
    LMC_RETURN_IF_ERROR(PunchHole(path, r.off, r.len));
    ++*done;
  }
  return Status::Ok();
}

Status Env::SpaceOf(const std::string& dir, uint64_t*, uint64_t*) {
  return Status::Unsupported("this store's Env cannot tell the free space of " + dir);
}

Env* Env::Default() {
  static PosixEnv* env = new PosixEnv;  // never destroyed: used until exit
  return env;
}

Result<std::string> ReadFileToString(Env* env, const std::string& path) {
  LMC_ASSIGN_OR_RETURN(std::unique_ptr<File> f, env->OpenFile(path, Env::OpenMode::kRead));
  std::string s(f->Size(), '\0');
  LMC_ASSIGN_OR_RETURN(size_t n, f->ReadAt(0, s.size(), reinterpret_cast<uint8_t*>(s.data())));
  s.resize(n);
  return s;
}

Status WriteFileAtomic(Env* env, const std::string& dir, const std::string& name,
                       const std::string& contents) {
  const std::string tmp = dir + "/" + name + ".tmp";
  if (env->FileExists(tmp)) LMC_RETURN_IF_ERROR(env->DeleteFile(tmp));
  LMC_ASSIGN_OR_RETURN(std::unique_ptr<File> f, env->OpenFile(tmp, Env::OpenMode::kCreate));
  LMC_RETURN_IF_ERROR(f->Append(reinterpret_cast<const uint8_t*>(contents.data()), contents.size()));
  LMC_RETURN_IF_ERROR(f->Sync());
  f.reset();
  LMC_RETURN_IF_ERROR(env->RenameFile(tmp, dir + "/" + name));
  return env->SyncDir(dir);
}

}  // namespace lmc::store
