// Env: every disk operation of the chunk store goes through this seam, as
// in LevelDB, so tests can inject short writes,
// ENOSPC, fsync failures and crashes (tests/store/fault_env.h).
//
// RocksDB does its own I/O and does not use this Env; see
// docs/ARCHITECTURE.md, "The chunk store", "Crash simulation", for how the index is
// modelled in crash tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lmc/status.h"

namespace lmc::store {

// An open file.
// Thread safety: ReadAt may run in any number of threads at once, and
// concurrently with one thread calling Append/Sync/Truncate. Append, Sync
// and Truncate must be serialised by the caller.
class File {
 public:
  virtual ~File() = default;
  // Reads up to n bytes at off (pread). Returns the bytes read: fewer than
  // n only at end of file.
  virtual Result<size_t> ReadAt(uint64_t off, size_t n, uint8_t* dst) const = 0;
  // The alignment of offset, length and buffer with which ReadDirect reads
  // past the page cache (O_DIRECT); 0 when this file has no such read (the
  // default). Large records are read so: no copy out of the page cache.
  virtual size_t DirectReadAlign() const { return 0; }
  // ReadAt of [off, off + n), off, n and dst aligned to DirectReadAlign(),
  // past the page cache. The default: ReadAt.
  virtual Result<size_t> ReadDirect(uint64_t off, size_t n, uint8_t* dst) const {
    return ReadAt(off, n, dst);
  }
  // Writes n bytes at the current end. On error some prefix of the bytes
  // may have been written; Size() tells how many.
  virtual Status Append(const uint8_t* p, size_t n) = 0;
  // Append of the pieces' concatenation, without staging them in one
  // buffer (PosixFile: pwritev). The default appends them one by one.
  virtual Status AppendV(std::span<const std::span<const uint8_t>> pieces);
  // Makes the file's data durable (fdatasync).
  virtual Status Sync() = 0;
  virtual Status Truncate(uint64_t size) = 0;
  // Current size in bytes (tracked, not an fstat per call).
  virtual uint64_t Size() const = 0;
};

// Held while alive; released by the destructor.
class FileLock {
 public:
  virtual ~FileLock() = default;
};

class Env {
 public:
  enum class OpenMode {
    kRead,       // read only; the file must exist
    kReadWrite,  // read and append; the file must exist
    kCreate,     // read and append; the file must not exist
  };
  virtual ~Env() = default;

  virtual Result<std::unique_ptr<File>> OpenFile(const std::string& path, OpenMode mode) = 0;
  // Creates a directory; ok if it already exists.
  virtual Status CreateDir(const std::string& path) = 0;
  // fsync of a directory: makes creations, renames and deletions in it durable.
  virtual Status SyncDir(const std::string& path) = 0;
  // Names of the entries of a directory, without "." and "..".
  virtual Result<std::vector<std::string>> ListDir(const std::string& path) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  virtual Status DeleteFile(const std::string& path) = 0;
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  // An exclusive, advisory, non-blocking lock (flock). Another holder,
  // in this process or another, makes it fail with kBusy.
  virtual Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) = 0;
  // Bytes the regular files under `dir` (recursively) occupy on disk:
  // allocated blocks, as du counts them. Entries that vanish meanwhile are
  // skipped.
  virtual Result<uint64_t> DiskBytes(const std::string& dir);
  // Bytes one file occupies on disk (allocated blocks, st_blocks * 512).
  // The default: its size.
  virtual Result<uint64_t> FileDiskBytes(const std::string& path);
  // Gives the blocks of [off, off + len) of an existing file back to the
  // filesystem (fallocate PUNCH_HOLE | KEEP_SIZE): the range then reads as
  // zeros and the file keeps its size. The store punches only whole
  // 4 KiB-aligned blocks of records no index entry names any more
  // (docs/ARCHITECTURE.md, "Hole punching"). The range must end before
  // the file's last byte: in RADOS, zeroing an object's tail truncates it.
  // kUnsupported where the filesystem or the Env cannot (the default);
  // kNotFound for no file.
  virtual Status PunchHole(const std::string& path, uint64_t off, uint64_t len);
  // PunchHole of several ranges of one file, in order, stopping at the
  // first failure; *done: how many were punched. The default punches each
  // in turn; an Env whose punch is a network request sends them together
  // (RADOS: one operation per pack).
  struct Range {
    uint64_t off = 0, len = 0;
  };
  virtual Status PunchHoles(const std::string& path, std::span<const Range> ranges, size_t* done);
  // The size of the filesystem that holds `dir` and the bytes free on it
  // for this process (statvfs: f_blocks and f_bavail). kUnsupported where
  // the Env cannot tell (the default).
  virtual Status SpaceOf(const std::string& dir, uint64_t* total, uint64_t* avail);

  // The POSIX implementation; lives for the whole process.
  static Env* Default();
};

// Reads a whole (small) file.
Result<std::string> ReadFileToString(Env* env, const std::string& path);
// Writes a small file atomically and durably: temp file, sync, rename,
// directory sync.
Status WriteFileAtomic(Env* env, const std::string& dir, const std::string& name,
                       const std::string& contents);

}  // namespace lmc::store
