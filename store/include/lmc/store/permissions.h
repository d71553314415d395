// The store belongs to its owner: what lmcfs creates in a store has no
// group or other permission bits, and a store that other users can reach is
// found here, for mount.lmcfs to refuse and lmcfs-fsck to report and
// tighten (docs/ARCHITECTURE.md, "Store permissions").
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "lmc/status.h"

namespace lmc::store {

// Modes lmcfs creates store files and directories with (the umask may only
// take bits away).
inline constexpr mode_t kStoreFileMode = 0600;
inline constexpr mode_t kStoreDirMode = 0700;

// One path of a store that another user could read, write or enter, or that
// belongs to another user.
struct LoosePath {
  std::string path;
  mode_t mode = 0;               // permission bits (07777)
  uid_t uid = 0;                 // owner
  bool other_owner = false;      // owned by another user than the store's owner
  bool loose_mode = false;       // has group or other bits (not for symbolic links)
  bool link = false;             // a symbolic link: lmcfs never makes one in a store
  std::string Describe() const;  // "PATH: mode 0644 (group or other users can access it)", ...
};

// Walks `dir` and everything under it, never following a symbolic link, and
// lists what another user than `owner` could access: group or other
// permission bits (symbolic links' own bits are meaningless and skipped), or
// an owner other than `owner`; and every symbolic link, which lmcfs never
// creates and never follows (someone planted it, or moved part of the store
// elsewhere: either way the store does not open through it). Entries that
// vanish meanwhile are skipped.
Result<std::vector<LoosePath>> FindLoosePaths(const std::string& dir, uid_t owner);

// chmod go-rwx on each of `paths` that has a loose mode (never chown, never
// through a symbolic link, never removes a link). An error names the first path it could not fix.
Status TightenPaths(const std::vector<LoosePath>& paths);

// The error mount.lmcfs gives for a store with loose paths: names the first
// few and the commands that fix it.
std::string LoosePathsMessage(const std::string& dir, const std::vector<LoosePath>& paths);

}  // namespace lmc::store
