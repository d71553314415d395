// An inode in memory: its record and namespace state, and its data
// (FileData). Lifecycle and lock order: fs_impl.h and docs/ARCHITECTURE.md,
// "The filesystem", "Lifecycle".
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "file_data.h"
#include "lmc/fs/records.h"

namespace lmc::fs {

struct Inode {
  Inode(uint64_t n, FileDataShared& shared) : ino(n), data(*this, shared) {}
  const uint64_t ino;
  std::mutex mu;  // guards everything below

  InodeRec rec;
  bool rec_dirty = false;  // rec differs from the store
  bool purged = false;     // deleted from the store; no more commits
  uint64_t nlookup = 0;    // kernel lookup references
  uint64_t nopen = 0;      // open handles
  // Those of them that may write (opened for writing, or made by create):
  // while one is open, pages a writer dirtied through a shared mapping may
  // sit in the kernel's page cache, unseen here (FileData::Seek).
  uint64_t nwrite = 0;

  // The name the file was created, last linked or renamed under (or looked
  // up by), for the delta policy's lineage (lmc/fs/delta_policy.h).
  std::string name_hint;
  uint64_t parent_hint = 0;   // the directory of that name (0: unknown)
  std::string dir_name_hint;  // that directory's own name_hint (empty: unknown, the root)

  // Extents, written bytes, the chunks at the encoders, the pending batch.
  FileData data;

  bool IsDir() const { return S_ISDIR(rec.mode); }
  bool IsReg() const { return S_ISREG(rec.mode); }
  bool Clean() const { return !rec_dirty && data.Clean(); }
  // After the commit that purged it: nothing of it is in the store any more.
  void MarkPurged() {
    purged = true;
    data.DropExtents();
  }
};
using InodePtr = std::shared_ptr<Inode>;

}  // namespace lmc::fs
