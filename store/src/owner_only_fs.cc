// OwnerOnlyRocksEnv: see owner_only_fs.h.
#include "owner_only_fs.h"

#include <fcntl.h>
#include <rocksdb/file_system.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "lmc/store/permissions.h"
#include "no_links.h"

namespace lmc::store {
namespace {

// Refuses `path` when a symbolic link is on it, the last component
// included, before RocksDB opens it (RocksDB's own opens follow links): a
// planted link must not make it truncate, write or read a file elsewhere.
// A check then an open, not one atomic step: it catches links that are
// there, and a store that another user can still write is refused at mount
// (FindLoosePaths).
rocksdb::IOStatus RefuseLinks(const std::string& path) {
  std::string name;
  const int dir = OpenParentNoLinks(path, &name);
  if (dir < 0) {
    if (errno == ENOENT) return rocksdb::IOStatus::OK();  // RocksDB reports what is missing
    return rocksdb::IOStatus::IOError(PathError("open", path).message());
  }
  struct stat st;
  const bool link = ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
  ::close(dir);
  if (link) {
    errno = ELOOP;
    return rocksdb::IOStatus::IOError(PathError("open", path).message());
  }
  return rocksdb::IOStatus::OK();
}

// Sets `path`'s mode after RocksDB created or opened it for writing. A
// symbolic link is refused (its target is not ours to change); the window
// between creation and chmod is closed by the store directory's own mode.
rocksdb::IOStatus Restrict(const rocksdb::IOStatus& created, const std::string& path, mode_t mode) {
  if (!created.ok()) return created;
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0)
    return rocksdb::IOStatus::IOError("lstat " + path + ": " + std::strerror(errno));
  if (S_ISLNK(st.st_mode))
    return rocksdb::IOStatus::IOError(path +
                                      " is a symbolic link, and lmcfs never follows links inside its store");
  if ((st.st_mode & 07777) != mode && ::chmod(path.c_str(), mode) != 0)
    return rocksdb::IOStatus::IOError("chmod " + path + ": " + std::strerror(errno));
  return created;
}

class OwnerOnlyFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  using rocksdb::FileSystemWrapper::FileSystemWrapper;
  const char* Name() const override { return "LmcOwnerOnlyFileSystem"; }

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override {
    if (auto l = RefuseLinks(f); !l.ok()) return l;
    return Restrict(target()->NewWritableFile(f, o, r, dbg), f, kStoreFileMode);
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* dbg) override {
    if (auto l = RefuseLinks(f); !l.ok()) return l;
    return Restrict(target()->ReopenWritableFile(f, o, r, dbg), f, kStoreFileMode);
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old,
                                      const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* dbg) override {
    if (auto l = RefuseLinks(f); !l.ok()) return l;
    return Restrict(target()->ReuseWritableFile(f, old, o, r, dbg), f, kStoreFileMode);
  }
  rocksdb::IOStatus NewRandomRWFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSRandomRWFile>* r,
                                    rocksdb::IODebugContext* dbg) override {
    if (auto l = RefuseLinks(f); !l.ok()) return l;
    return Restrict(target()->NewRandomRWFile(f, o, r, dbg), f, kStoreFileMode);
  }
  rocksdb::IOStatus NewSequentialFile(const std::string& f, const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSSequentialFile>* r,
                                      rocksdb::IODebugContext* dbg) override {
    if (auto l = RefuseLinks(f); !l.ok()) return l;
    return target()->NewSequentialFile(f, o, r, dbg);
  }
  rocksdb::IOStatus NewRandomAccessFile(const std::string& f, const rocksdb::FileOptions& o,
                                        std::unique_ptr<rocksdb::FSRandomAccessFile>* r,
                                        rocksdb::IODebugContext* dbg) override {
    if (auto l = RefuseLinks(f); !l.ok()) return l;
    return target()->NewRandomAccessFile(f, o, r, dbg);
  }
  rocksdb::IOStatus CreateDir(const std::string& d, const rocksdb::IOOptions& o,
                              rocksdb::IODebugContext* dbg) override {
    if (auto l = RefuseLinks(d); !l.ok()) return l;
    return Restrict(target()->CreateDir(d, o, dbg), d, kStoreDirMode);
  }
  rocksdb::IOStatus CreateDirIfMissing(const std::string& d, const rocksdb::IOOptions& o,
                                       rocksdb::IODebugContext* dbg) override {
    if (auto l = RefuseLinks(d); !l.ok()) return l;
    return Restrict(target()->CreateDirIfMissing(d, o, dbg), d, kStoreDirMode);
  }
  rocksdb::IOStatus LockFile(const std::string& f, const rocksdb::IOOptions& o, rocksdb::FileLock** l,
                             rocksdb::IODebugContext* dbg) override {
    if (auto link = RefuseLinks(f); !link.ok()) return link;
    rocksdb::IOStatus s = Restrict(target()->LockFile(f, o, l, dbg), f, kStoreFileMode);
    if (!s.ok() && *l) {
      target()->UnlockFile(*l, o, dbg).PermitUncheckedError();
      *l = nullptr;
    }
    return s;
  }
  rocksdb::IOStatus NewLogger(const std::string& f, const rocksdb::IOOptions& o,
                              std::shared_ptr<rocksdb::Logger>* r, rocksdb::IODebugContext* dbg) override {
    if (auto l = RefuseLinks(f); !l.ok()) return l;
    return Restrict(target()->NewLogger(f, o, r, dbg), f, kStoreFileMode);
  }
};

}  // namespace

rocksdb::Env* OwnerOnlyRocksEnv() {
  // Never destroyed: RocksDB's background threads may use it until exit.
  static rocksdb::Env* env =
      rocksdb::NewCompositeEnv(std::make_shared<OwnerOnlyFileSystem>(rocksdb::FileSystem::Default()))
          .release();
  return env;
}

}  // namespace lmc::store
