// Private state of fs::Filesystem. Lifecycle and lock order are in
// docs/ARCHITECTURE.md, "The filesystem"; in short:
//
//   ns_mu (shared_mutex) -> Inode::mu (several: increasing ino) -> table_mu
//   Inode::mu -> EncoderPool's and EncodeJob's mutexes (leaves)
//   Inode::mu -> GpuPath's mutex (a leaf: read-ahead's GPU batch; the GPU
//   feeder takes it holding nothing)
//
// ns_mu: exclusive for every namespace change (create, unlink, rename, ...)
//   and for Forget (which may evict or purge); shared for Lookup and ReadDir.
// Inode::mu: the inode's attributes, counts and whole data state. Data ops
//   (read, write, flush, setattr) take only this.
// table_mu: the ino -> Inode map only; a leaf, held for map operations.
// Encoder threads never take an inode's mutex: a writer may wait for a job
// with its inode's mutex held.
#pragma once

#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string_view>
#include <unordered_map>

#include "file_data.h"
#include "inode.h"
#include "lmc/fs/filesystem.h"

namespace lmc::fs {

struct Filesystem::Impl {
  explicit Impl(Filesystem* f);

  Filesystem* fs;
  store::Store* store;

  std::shared_mutex ns_mu;
  std::mutex table_mu;  // guards table and next_ino
  std::unordered_map<uint64_t, InodePtr> table;
  uint64_t next_ino = 2;
  // StatFs's count of inode records, recounted at most once a second.
  std::mutex statfs_mu;  // guards the two below
  uint64_t inodes_counted = 0;
  int64_t inodes_counted_ns = 0;

  // --- table (filesystem.cc) ---
  // The in-memory inode, loaded from the store if needed; nullptr if absent.
  // Sets *err (ENOENT, EIO).
  InodePtr Get(uint64_t ino, int* err);
  void Erase(uint64_t ino);
  uint64_t CachedInodes() {
    std::lock_guard lk(table_mu);
    return table.size();
  }
  int ToErrno(const Status& s, std::string_view what, uint64_t ino);

  // The chunk at (ino, off) was re-encoded (the delta policy, garbage
  // collection): see FileData::RefreshFrameLen. Reads the frame length the
  // store has now under the inode's mutex, so that of two re-encodings told
  // in either order the later one's length stays. Nothing when the inode
  // or the chunk is gone. Returns whether the stored bytes changed.
  // An inode the kernel does not know (it was not in the table before) is
  // evicted again once refreshed, so that refreshing a whole store's files
  // after gc does not leave them all, and their extent maps, in memory.
  bool RefreshFrameLen(uint64_t ino, uint64_t off, const store::ChunkKey& key);
  // Whether `in` is still the table's inode for its number (forget and
  // eviction take it out with its mutex held: call with in->mu held).
  // Background work that holds an inode from before must not write through
  // one that is out: the next Get loads another from the records.
  bool InTable(const InodePtr& in);
  // Chunks `keys` were re-encoded: every inode in memory refreshes its
  // extents naming one (FileData::RefreshKeys), committed or not, and the
  // kernel is told. Run after the re-encoding's commit, so that an extent
  // made before it is refreshed here and one made after it reads the new
  // length from the index. Returns the extents changed.
  uint64_t RefreshCached(const ChunkKeySet& keys);
  // Takes `in` out of the table if nothing holds it: no kernel reference,
  // no handle, nothing unwritten, no other thread's pointer. Needs ns_mu exclusively (as Forget does),
  // so that no Lookup is between its Get and its reference; when another
  // thread holds it, `in` stays (best effort: it never waits for ns_mu).
  void EvictIfUnused(const InodePtr& in);

  // FsOps::SetAttrListener's and SetEntryListener's listeners; called
  // under the shared lock.
  std::shared_mutex attr_mu;
  AttrListener attr_listener;
  EntryListener entry_listener;
  void TellAttr(uint64_t ino, bool data = false);
  void TellEntry(uint64_t parent, std::string_view name);
  // FollowerRefreshed: changed inodes that were open then (ino -> data
  // changed), told of again once closed.
  std::unordered_map<uint64_t, bool> changed_while_open;

  // Last member: what the data pipelines share (its encoder threads are
  // joined first, while everything their jobs use lives).
  FileDataShared data;
};

}  // namespace lmc::fs
