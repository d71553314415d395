// NewRocksEnvOverStoreEnv: see env_rocks_fs.h.
#include "env_rocks_fs.h"

#include <string>
#include <utility>

#include "owner_only_fs.h"

namespace lmc::store {
namespace {

rocksdb::IOStatus ToIO(const Status& s) {
  if (s.ok()) return rocksdb::IOStatus::OK();
  if (s.code() == Code::kNoSpace) return rocksdb::IOStatus::NoSpace(s.message());
  return rocksdb::IOStatus::IOError(s.message());
}

// A writable file of RocksDB's as a store Env file: appends, syncs and
// truncations are the Env's (and so its faults).
class EnvWritableFile final : public rocksdb::FSWritableFile {
 public:
  explicit EnvWritableFile(std::unique_ptr<File> f) : f_(std::move(f)) {}
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions&,
                           rocksdb::IODebugContext*) override {
    return ToIO(f_->Append(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
  }
  rocksdb::IOStatus Truncate(uint64_t size, const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return ToIO(f_->Truncate(size));
  }
  rocksdb::IOStatus Close(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    f_.reset();
    return rocksdb::IOStatus::OK();
  }
  rocksdb::IOStatus Flush(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();  // appends reach the file at once
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return ToIO(f_->Sync());
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return ToIO(f_->Sync());
  }
  bool IsSyncThreadSafe() const override { return false; }
  uint64_t GetFileSize(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return f_ ? f_->Size() : 0;
  }

 private:
  std::unique_ptr<File> f_;
};

// A directory whose fsync is the Env's SyncDir (which makes the files
// created in it durable).
class EnvDirectory final : public rocksdb::FSDirectory {
 public:
  EnvDirectory(Env* env, std::string path) : env_(env), path_(std::move(path)) {}
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return ToIO(env_->SyncDir(path_));
  }
  rocksdb::IOStatus Close(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();
  }

 private:
  Env* env_;
  std::string path_;
};

class EnvFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  // Reads, locks and the info log: the owner-only file system (its files
  // get the store's modes, as without this wrapper).
  explicit EnvFileSystem(Env* env)
      : rocksdb::FileSystemWrapper(OwnerOnlyRocksEnv()->GetFileSystem()), env_(env) {}
  const char* Name() const override { return "LmcStoreEnvFileSystem"; }

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions&,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext*) override {
    // RocksDB creates or overwrites; the Env creates only new files.
    if (env_->FileExists(f))
      if (auto d = ToIO(env_->DeleteFile(f)); !d.ok()) return d;
    return Wrap(env_->OpenFile(f, Env::OpenMode::kCreate), r);
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* dbg) override {
    if (!env_->FileExists(f)) return NewWritableFile(f, o, r, dbg);
    return Wrap(env_->OpenFile(f, Env::OpenMode::kReadWrite), r);
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old,
                                      const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* dbg) override {
    if (auto s = RenameFile(old, f, {}, dbg); !s.ok()) return s;
    return NewWritableFile(f, o, r, dbg);
  }
  rocksdb::IOStatus NewDirectory(const std::string& d, const rocksdb::IOOptions&,
                                 std::unique_ptr<rocksdb::FSDirectory>* r,
                                 rocksdb::IODebugContext*) override {
    r->reset(new EnvDirectory(env_, d));
    return rocksdb::IOStatus::OK();
  }
  rocksdb::IOStatus DeleteFile(const std::string& f, const rocksdb::IOOptions&,
                               rocksdb::IODebugContext*) override {
    return ToIO(env_->DeleteFile(f));
  }
  rocksdb::IOStatus RenameFile(const std::string& from, const std::string& to, const rocksdb::IOOptions&,
                               rocksdb::IODebugContext*) override {
    return ToIO(env_->RenameFile(from, to));
  }
  rocksdb::IOStatus CreateDir(const std::string& d, const rocksdb::IOOptions&,
                              rocksdb::IODebugContext*) override {
    return ToIO(env_->CreateDir(d));
  }
  rocksdb::IOStatus CreateDirIfMissing(const std::string& d, const rocksdb::IOOptions&,
                                       rocksdb::IODebugContext*) override {
    return ToIO(env_->CreateDir(d));
  }

 private:
  static rocksdb::IOStatus Wrap(Result<std::unique_ptr<File>> f,
                                std::unique_ptr<rocksdb::FSWritableFile>* r) {
    if (!f.ok()) return ToIO(f.status());
    r->reset(new EnvWritableFile(std::move(f).value()));
    return rocksdb::IOStatus::OK();
  }
  Env* env_;
};

}  // namespace

std::unique_ptr<rocksdb::Env> NewRocksEnvOverStoreEnv(Env* env) {
  return rocksdb::NewCompositeEnv(std::make_shared<EnvFileSystem>(env));
}

}  // namespace lmc::store
