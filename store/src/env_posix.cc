// The POSIX Env: pread/pwrite/fdatasync on file descriptors, flock locks.
// Files are created 0600 and directories 0700 (whatever the umask leaves of
// that), and no open follows a symbolic link in the last component
// (docs/ARCHITECTURE.md, "Store permissions").
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <vector>

#include "lmc/store/env.h"
#include "lmc/store/permissions.h"

namespace lmc::store {
namespace {

Status Errno(const std::string& what, const std::string& path) {
  return Status::FromErrno(errno, what + " " + path);
}

// The error of an open with O_NOFOLLOW (and O_CREAT | O_EXCL, which never
// follows a link either) that met a symbolic link: said as such, since the
// errno (ELOOP, EEXIST) does not tell a user what is wrong.
Status OpenError(const std::string& what, const std::string& path) {
  const int err = errno;
  struct stat st;
  if ((err == ELOOP || err == EEXIST) && ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
    return Status::IOError(what + " " + path +
                           ": it is a symbolic link, and lmcfs never follows links inside its store "
                           "(docs/ARCHITECTURE.md, \"Store permissions\"); remove it");
  errno = err;
  return Errno(what, path);
}

class PosixFile final : public File {
 public:
  PosixFile(int fd, std::string path, uint64_t size) : fd_(fd), path_(std::move(path)), size_(size) {}
  ~PosixFile() override { ::close(fd_); }

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

  // pwritev in runs of at most IOV_MAX pieces; a short write resumes
  // inside the piece it stopped in.
  Status AppendV(std::span<const std::span<const uint8_t>> pieces) override {
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

  Status Sync() override {
    if (::fdatasync(fd_) != 0) return Errno("fdatasync", path_);
    return Status::Ok();
  }

  Status Truncate(uint64_t size) override {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) return Errno("ftruncate", path_);
    size_.store(size);
    return Status::Ok();
  }

  uint64_t Size() const override { return size_.load(); }

 private:
  int fd_;
  std::string path_;
  std::atomic<uint64_t> size_;
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
    int fd = ::open(path.c_str(), flags | O_NOFOLLOW, kStoreFileMode);
    if (fd < 0) {
      if (errno == ENOENT) return Status::NotFound("no file " + path);
      return OpenError("open", path);
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      Status s = Errno("fstat", path);
      ::close(fd);
      return s;
    }
    return std::unique_ptr<File>(new PosixFile(fd, path, static_cast<uint64_t>(st.st_size)));
  }

  Status CreateDir(const std::string& path) override {
    if (::mkdir(path.c_str(), kStoreDirMode) != 0 && errno != EEXIST) return Errno("mkdir", path);
    return Status::Ok();
  }

  Status SyncDir(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return OpenError("open directory", path);
    Status s;
    if (::fsync(fd) != 0) s = Errno("fsync directory", path);
    ::close(fd);
    return s;
  }

  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return Status::NotFound("no directory " + path);
      return OpenError("open directory", path);
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

  Status DeleteFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return Errno("unlink", path);
    return Status::Ok();
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return Errno("rename " + from + " to", to);
    return Status::Ok();
  }

  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, kStoreFileMode);
    if (fd < 0) return OpenError("open lock file", path);
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
