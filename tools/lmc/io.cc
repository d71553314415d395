#include "io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace lmc::cli {

ReadFn FdReader(int fd, const std::string& name) {
  return [fd, name](uint8_t* buf, size_t n) -> Result<size_t> {
    for (;;) {
      ssize_t r = ::read(fd, buf, n);
      if (r >= 0) return static_cast<size_t>(r);
      if (errno != EINTR) return Status::FromErrno(errno, "read " + name);
    }
  };
}

WriteFn FdWriter(int fd, const std::string& name) {
  return [fd, name](const uint8_t* buf, size_t n) -> Status {
    while (n > 0) {
      ssize_t w = ::write(fd, buf, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno(errno, "write " + name);
      }
      buf += w;
      n -= static_cast<size_t>(w);
    }
    return Status::Ok();
  };
}

Result<std::vector<uint8_t>> ReadFile(const std::string& path) {
  int fd = path == "-" ? 0 : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, path);
  std::vector<uint8_t> data;
  struct stat sb;
  if (::fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode)) data.reserve(static_cast<size_t>(sb.st_size));
  ReadFn rd = FdReader(fd, path);
  Status st;
  for (;;) {
    size_t old = data.size();
    data.resize(old + (1 << 20));
    Result<size_t> r = rd(data.data() + old, 1 << 20);
    if (!r.ok()) {
      st = r.status();
      break;
    }
    data.resize(old + *r);
    if (*r == 0) break;
  }
  if (fd != 0) ::close(fd);
  if (!st.ok()) return st;
  return data;
}

Result<OutputFile> OutputFile::Open(const std::string& path, bool overwrite) {
  OutputFile f;
  f.path_ = path;
  if (path == "-") {
    f.fd_ = 1;
    return f;
  }
  struct stat sb;
  if (!overwrite && ::stat(path.c_str(), &sb) == 0)
    return Status::InvalidArgument(path + " already exists; use -f to overwrite it");
  std::string tmpl = path + ".tmp.XXXXXX";
  f.fd_ = ::mkstemp(tmpl.data());
  if (f.fd_ < 0) return Status::FromErrno(errno, "create " + tmpl);
  ::fchmod(f.fd_, 0644);
  f.tmp_ = tmpl;
  return f;
}

OutputFile::OutputFile(OutputFile&& o) noexcept
    : path_(std::move(o.path_)), tmp_(std::move(o.tmp_)), fd_(o.fd_), committed_(o.committed_) {
  o.fd_ = -1;
  o.tmp_.clear();
}

OutputFile::~OutputFile() {
  if (fd_ > 1) ::close(fd_);
  if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

Status OutputFile::Commit() {
  if (fd_ == 1) {
    committed_ = true;
    return Status::Ok();
  }
  if (::fsync(fd_) != 0) return Status::FromErrno(errno, "fsync " + tmp_);
  if (::close(fd_) != 0) {
    fd_ = -1;
    return Status::FromErrno(errno, "close " + tmp_);
  }
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) return Status::FromErrno(errno, "rename to " + path_);
  committed_ = true;
  return Status::Ok();
}

}  // namespace lmc::cli
