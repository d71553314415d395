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
  // Files: 0, every stat reaches us, so st_blocks follows the stored size
  // at once. Directories: as long as their names are kept (their attributes
  // change through this kernel, which drops them for every entry made or
  // removed in one, or in another node's daemon, no sooner seen than a
  // name), so that a path's walk does not ask for each directory's
  // attributes again (the permission check of each component).
  double attr_timeout = 0.0;
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
