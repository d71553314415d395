// Serving an fs::Filesystem through the kernel's FUSE: the session's
// options, mount, request loop and unmount. The only public entry of
// lmc_fs_fuse, the one target that links libfuse; mount.lmcfs
// (tools/mountlmcfs) is its only user.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace lmc::fs {

class FsOps;

struct FuseSessionOptions {
  std::string mountpoint;
  std::string fsname;        // shown by mount(8) and df as "lmcfs:<fsname>"
  bool allow_other = false;  // let other users through (the kernel still checks modes)
  bool read_only = false;
  std::vector<std::string> extra;  // more -o options, handed to libfuse as they are
  unsigned threads = 0;            // FUSE worker threads; 0: 2 per core, at least 4
  // The mount's kernel read-ahead window in KiB (read_ahead_kb of its
  // backing device, 128 by default for FUSE): larger read requests and
  // fewer round trips for sequential readers. Set on the first lookup,
  // create or open (it needs root; otherwise the default stays). 0 leaves it.
  unsigned read_ahead_kb = 4096;
  // Seconds the kernel keeps a file's attributes, where `fs` tells of the
  // changes it makes on its own and of those a follower's refresh brings
  // (FsOps::SetAttrListener): each is then dropped from the kernel's cache
  // at once. 0 (or an FsOps that cannot tell): the kernel asks for them at
  // every stat and before every read().
  double file_attr_timeout = 1.0;
};

// Exit codes of ServeFuse, as mount(8) reads them.
inline constexpr int kFuseUsage = 16;    // libfuse refused the options
inline constexpr int kFuseFailure = 32;  // mount failed
inline constexpr int kFuseLoop = 8;      // the request loop ended on an error

// Mounts `fs` at options.mountpoint, calls on_mounted once the mount is live
// (before the first request is served), and serves until the filesystem is
// unmounted or the process gets SIGINT/SIGTERM/SIGHUP; then unmounts.
// Returns 0, or one of the codes above with *error saying why. `fs` must
// outlive the call; its Shutdown is the caller's.
int ServeFuse(FsOps* fs, const FuseSessionOptions& options, const std::function<void()>& on_mounted,
              std::string* error);

}  // namespace lmc::fs
