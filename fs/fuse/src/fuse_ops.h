// The libfuse3 low-level glue over fs::Filesystem (fuse_ops.cc), private to
// lmc_fs_fuse; session.cc serves it. Each operation is a thin reply
// over a Filesystem call; nothing escapes a callback (exceptions -> EIO,
// bad_alloc -> ENOMEM).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

struct fuse_lowlevel_ops;

namespace lmc::fs {

class FsOps;

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
};

// Sets the read-ahead window of the lmcfs mount at ctx.mountpoint (its
// device from /proc/self/mountinfo; a stat of the mountpoint would be a
// request to this daemon), once. Best effort.
void SetReadAheadOnce(FuseContext& ctx);

const fuse_lowlevel_ops& LowLevelOps();

}  // namespace lmc::fs
