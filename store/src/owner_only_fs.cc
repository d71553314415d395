// OwnerOnlyRocksEnv: see owner_only_fs.h.
#include "owner_only_fs.h"

#include <rocksdb/file_system.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "lmc/store/permissions.h"

namespace lmc::store {
namespace {

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
    return Restrict(target()->NewWritableFile(f, o, r, dbg), f, kStoreFileMode);
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* dbg) override {
    return Restrict(target()->ReopenWritableFile(f, o, r, dbg), f, kStoreFileMode);
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old,
                                      const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* dbg) override {
    return Restrict(target()->ReuseWritableFile(f, old, o, r, dbg), f, kStoreFileMode);
  }
  rocksdb::IOStatus NewRandomRWFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSRandomRWFile>* r,
                                    rocksdb::IODebugContext* dbg) override {
    return Restrict(target()->NewRandomRWFile(f, o, r, dbg), f, kStoreFileMode);
  }
  rocksdb::IOStatus CreateDir(const std::string& d, const rocksdb::IOOptions& o,
                              rocksdb::IODebugContext* dbg) override {
    return Restrict(target()->CreateDir(d, o, dbg), d, kStoreDirMode);
  }
  rocksdb::IOStatus CreateDirIfMissing(const std::string& d, const rocksdb::IOOptions& o,
                                       rocksdb::IODebugContext* dbg) override {
    return Restrict(target()->CreateDirIfMissing(d, o, dbg), d, kStoreDirMode);
  }
  rocksdb::IOStatus LockFile(const std::string& f, const rocksdb::IOOptions& o, rocksdb::FileLock** l,
                             rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = Restrict(target()->LockFile(f, o, l, dbg), f, kStoreFileMode);
    if (!s.ok() && *l) {
      target()->UnlockFile(*l, o, dbg).PermitUncheckedError();
      *l = nullptr;
    }
    return s;
  }
  rocksdb::IOStatus NewLogger(const std::string& f, const rocksdb::IOOptions& o,
                              std::shared_ptr<rocksdb::Logger>* r, rocksdb::IODebugContext* dbg) override {
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
