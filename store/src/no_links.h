// Opening a store's own paths without following a symbolic link anywhere
// on them, not only in the last component: a store directory that another
// user could once write may hold a planted link (packs -> their directory),
// and lmcfs must not write, read or create through it (docs/ARCHITECTURE.md,
// "Store permissions"). The Store opens its directory by its real path
// (realpath at Store::Open), so every path under it is link-free by
// construction and a link found later was put there by someone.
#pragma once

#include <sys/types.h>

#include <string>

#include "lmc/status.h"

namespace lmc::store {

// open(path, flags | O_NOFOLLOW | O_CLOEXEC, mode) that fails with ELOOP if
// any component of `path` is a symbolic link: openat2 with
// RESOLVE_NO_SYMLINKS, or, where the kernel lacks openat2, a walk from "/"
// (or ".") one component at a time with O_NOFOLLOW. Returns the descriptor,
// or -1 with errno set.
int OpenNoLinks(const std::string& path, int flags, mode_t mode = 0);

// The walk OpenNoLinks falls back to where openat2 is missing (kernels
// before 5.6, or a seccomp filter that answers ENOSYS); the same contract.
int OpenNoLinksByWalk(const std::string& path, int flags, mode_t mode = 0);

// The directory holding `path`'s last component, opened O_PATH through no
// link (OpenNoLinks), and that component's name in *name. -1 with errno on
// failure.
int OpenParentNoLinks(const std::string& path, std::string* name);

// The first prefix of `path` (itself included) that is a symbolic link, or
// "" if none is (lstat of each prefix; for error messages).
std::string FirstLinkOn(const std::string& path);

// The Status of a failed operation `what` on `path`, from errno: when a
// symbolic link on the path is the cause, says which and what to do,
// since ELOOP, ENOTDIR or EEXIST alone do not tell a user that.
Status PathError(const std::string& what, const std::string& path);

}  // namespace lmc::store
