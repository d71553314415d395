// Store permissions: finding and tightening what other users could reach
// (docs/ARCHITECTURE.md, "Store permissions").
#include "lmc/store/permissions.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>

namespace lmc::store {
namespace {

constexpr mode_t kGroupOther = 077;

std::string Octal(mode_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// Adds `path` to `out` if another user than `owner` could reach it.
void Check(const std::string& path, uid_t owner, std::vector<LoosePath>* out) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return;  // vanished meanwhile
  LoosePath p{.path = path, .mode = st.st_mode & 07777, .uid = st.st_uid};
  p.other_owner = st.st_uid != owner;
  p.link = S_ISLNK(st.st_mode);
  p.loose_mode = !p.link && (st.st_mode & kGroupOther) != 0;
  if (p.other_owner || p.loose_mode || p.link) out->push_back(std::move(p));
}

}  // namespace

std::string LoosePath::Describe() const {
  std::string s = path + ":";
  if (loose_mode) s += " mode " + Octal(mode) + " (group or other users can access it)";
  if (loose_mode && other_owner) s += ",";
  if (other_owner) s += " owned by uid " + std::to_string(uid);
  if (link)
    s += std::string(loose_mode || other_owner ? "," : "") + " a symbolic link (lmcfs never follows one)";
  return s;
}

Result<std::vector<LoosePath>> FindLoosePaths(const std::string& dir, uid_t owner) {
  namespace fs = std::filesystem;
  std::vector<LoosePath> out;
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return Status::FromErrno(errno, "stat " + dir);
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(dir + " is not a directory");
  Check(dir, owner, &out);
  std::error_code ec;
  // Symbolic links are listed, not followed (the default of the iterator).
  fs::recursive_directory_iterator it(dir, ec), end;
  if (ec) return Status::IOError("cannot list " + dir + ": " + ec.message());
  while (it != end) {
    Check(it->path().string(), owner, &out);
    it.increment(ec);
    if (ec) {
      if (ec == std::errc::no_such_file_or_directory) continue;  // vanished meanwhile
      return Status::IOError("cannot list " + dir + ": " + ec.message());
    }
  }
  return out;
}

Status TightenPaths(const std::vector<LoosePath>& paths) {
  for (const LoosePath& p : paths) {
    if (!p.loose_mode) continue;
    // fchmodat with AT_SYMLINK_NOFOLLOW: a path replaced by a link since it
    // was found fails (EOPNOTSUPP) rather than changes the link's target.
    if (::fchmodat(AT_FDCWD, p.path.c_str(), p.mode & ~kGroupOther, AT_SYMLINK_NOFOLLOW) != 0 &&
        errno != ENOENT)
      return Status::FromErrno(errno, "chmod go-rwx " + p.path);
  }
  return Status::Ok();
}

std::string LoosePathsMessage(const std::string& dir, const std::vector<LoosePath>& paths) {
  constexpr size_t kNamed = 3;
  std::string m = "store " + dir + " is accessible to other users than its owner (lmcfs stores checkpoints " +
                  "for their owner only): ";
  bool other_owner = false, link = false;
  for (size_t i = 0; i < paths.size(); ++i) {
    other_owner |= paths[i].other_owner;
    link |= paths[i].link;
    if (i < kNamed) m += (i ? "; " : "") + paths[i].Describe();
  }
  if (paths.size() > kNamed) m += "; and " + std::to_string(paths.size() - kNamed) + " more";
  m += ". Fix it with `chmod -R go-rwx " + dir + "` or `lmcfs-fsck --repair " + dir + "`";
  if (other_owner) m += ", and give the store to the user who mounts it (chown -R USER " + dir + ")";
  if (link) m += ", and remove the symbolic links (or put what they point to in their place)";
  m += ", or mount with -o unsafe_store_perms if this is intended";
  return m;
}

}  // namespace lmc::store
