// ServeFuse (lmc/fs/fuse_session.h): one libfuse low-level session over the
// adapters of fuse_ops.cc.
#include <fuse3/fuse_lowlevel.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <thread>

#include "fuse_ops.h"
#include "lmc/fs/fuse_session.h"
#include "lmc/text.h"

namespace lmc::fs {

int ServeFuse(FsOps* fs, const FuseSessionOptions& o, const std::function<void()>& on_mounted,
              std::string* error) {
  FuseContext ctx;
  ctx.fs = fs;
  ctx.mountpoint = o.mountpoint;
  ctx.read_ahead_kb = o.read_ahead_kb;
  // libfuse splits options at commas and takes "\," as a comma (a union's
  // fsname lists its stores).
  std::string fsname;
  for (char c : o.fsname) {
    if (c == ',' || c == '\\') fsname += '\\';
    fsname += c;
  }
  std::string opts = "default_permissions,fsname=lmcfs:" + fsname + ",subtype=lmcfs";
  if (o.allow_other) opts += ",allow_other";
  if (o.read_only) opts += ",ro";
  for (const auto& x : o.extra) opts += "," + x;
  std::vector<std::string> argstore = {"mount.lmcfs", "-o", opts};
  std::vector<char*> av;
  for (auto& s : argstore) av.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(av.size()), av.data());
  fuse_session* se = fuse_session_new(&args, &LowLevelOps(), sizeof(fuse_lowlevel_ops), &ctx);
  fuse_opt_free_args(&args);
  if (!se) {
    *error = "bad FUSE options: " + opts;
    return kFuseUsage;
  }
  if (fuse_set_signal_handlers(se) != 0) {
    fuse_session_destroy(se);
    *error = "cannot install signal handlers";
    return kFuseFailure;
  }
  if (fuse_session_mount(se, o.mountpoint.c_str()) != 0) {
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    *error = "cannot mount at " + o.mountpoint + " (see the message above)";
    return kFuseFailure;
  }
  // The files' attribute timeout, with the filesystem telling the kernel
  // of the changes it makes on its own (attributes only: offset -1 drops no
  // pages) and of those a follower's refresh brings (the bytes too: offset
  // 0, length 0 drops every cached page of the file). The listener goes
  // before the session does.
  const bool tells = o.file_attr_timeout > 0 && fs->SetAttrListener([se](uint64_t ino, bool data) {
    const int rc = fuse_lowlevel_notify_inval_inode(se, ino, data ? 0 : -1, 0);
    // ENOENT: the kernel holds no such inode (nothing cached to drop);
    // ENOSYS: before INIT; ENODEV: unmounted meanwhile.
    if (rc != 0 && rc != -ENOENT && rc != -ENOSYS && rc != -ENODEV)
      spdlog::warn("lmcfs: telling the kernel that inode {} changed failed ({})", ino, std::strerror(-rc));
  });
  if (tells) ctx.attr_timeout = o.file_attr_timeout;
  // Names another node made, removed or renamed (a follower's refresh):
  // the kernel drops its entry at once instead of keeping it for
  // entry_timeout, in which a name saved over would lead to the removed
  // file (ENOENT for a name that exists).
  const bool tells_entries = fs->SetEntryListener([se](uint64_t parent, std::string_view name) {
    const int rc = fuse_lowlevel_notify_inval_entry(se, parent, name.data(), name.size());
    // ENOENT: the kernel holds no such directory or entry.
    if (rc != 0 && rc != -ENOENT && rc != -ENOSYS && rc != -ENODEV)
      spdlog::warn("lmcfs: telling the kernel that entry {} of directory {} changed failed ({})",
                   EscapeBytes(name, true), parent, std::strerror(-rc));
  });
  if (on_mounted) on_mounted();
  fuse_loop_config* cfg = fuse_loop_cfg_create();
  unsigned threads = o.threads ? o.threads : std::max(4u, 2 * std::thread::hardware_concurrency());
  fuse_loop_cfg_set_max_threads(cfg, threads);
  int rc = fuse_session_loop_mt(se, cfg);
  fuse_loop_cfg_destroy(cfg);
  if (tells) fs->SetAttrListener(nullptr);
  if (tells_entries) fs->SetEntryListener(nullptr);
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  if (rc < 0) {
    *error = "the FUSE request loop failed";
    return kFuseLoop;
  }
  return 0;
}

}  // namespace lmc::fs
