// The libfuse3 low-level glue over fs::Filesystem (fuse_ops.cc), private to
// lmc_fs_fuse; session.cc serves it. Each operation is a thin reply
// over a Filesystem call; nothing escapes a callback (exceptions -> EIO,
// bad_alloc -> ENOMEM).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

struct fuse_lowlevel_ops;

namespace lmc::fs {

class FsOps;
struct DirHandle;  // fuse_ops.cc

// The directory handles the kernel holds (opendir to releasedir). One it
// never released (an unmount right after a closedir, before its queued
// RELEASEDIR reached us) goes with the session.
class DirHandles {
 public:
  DirHandles();
  ~DirHandles();
  // Keeps h; its file handle for the kernel.
  uint64_t Add(std::unique_ptr<DirHandle> h);
  DirHandle* Get(uint64_t fh);
  void Remove(uint64_t fh);

 private:
  std::mutex mu_;
  std::unordered_map<uint64_t, std::unique_ptr<DirHandle>> open_;
};

// The session's userdata.
struct FuseContext {
  FsOps* fs = nullptr;
  uint32_t max_write = 1u << 20;  // largest FUSE write we ask for (the kernel's limit here)
  double entry_timeout = 1.0;     // seconds the kernel caches names
  // Files and symlinks: FuseSessionOptions::file_attr_timeout (1 s) where
  // the filesystem tells the kernel of every change it makes on its own
  // (the stored size after encoding or a rebase: st_blocks) and of every
  // change a follower's refresh applies, so that stat shows them at once
  // all the same; else (FsOps::TellsAttrOf: a union's file redirected to
  // the writable member) 0, every stat reaches us. With
  // 0, auto_inval_data makes the kernel ask for a file's attributes before
  // every read(): each read, even from the page cache, is a GETATTR to the
  // daemon first (a 4 KiB read cost 16 us instead of 1).
  double attr_timeout = 0.0;
  // Directories: as long as names (entry_timeout), so that a path's walk
  // checks each component's permissions without a GETATTR. The kernel
  // drops a directory's attributes itself whenever an entry is made or
  // removed in it through this mount, and SETATTR replies with the new
  // ones; another node's change shows within the second, as its names do.
  double dir_attr_timeout = 1.0;
  // The mount's kernel read-ahead window (FuseSessionOptions::read_ahead_kb),
  // set once, by the first lookup, create or open: the kernel resets it
  // while it processes INIT, which comes after the mount.
  std::string mountpoint;
  unsigned read_ahead_kb = 0;
  std::atomic<bool> read_ahead_set{false};
  DirHandles dirs;
};

// Sets the read-ahead window of the lmcfs mount at ctx.mountpoint (its
// device from /proc/self/mountinfo; a stat of the mountpoint would be a
// request to this daemon), once. Best effort.
void SetReadAheadOnce(FuseContext& ctx);

const fuse_lowlevel_ops& LowLevelOps();

}  // namespace lmc::fs
