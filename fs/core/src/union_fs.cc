#include "lmc/fs/union_fs.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

namespace lmc::fs {

namespace {
constexpr uint64_t kRoot = 1;
constexpr unsigned kIdxBits = 8;
}  // namespace

UnionFs::UnionFs(std::vector<UnionMember> members)
    : members_(std::move(members)), fs_(new std::atomic<Filesystem*>[members_.size()]) {
  for (size_t i = 0; i < members_.size(); ++i) {
    fs_[i].store(members_[i].fs);
    if (members_[i].writable) rw_ = static_cast<int>(i);
  }
  Dir root;
  for (size_t i = 0; i < members_.size(); ++i) root.members.push_back({i, kRoot});
  IndexDir(kRoot, root, true);
  dirs_.emplace(kRoot, std::move(root));
}

void UnionFs::IndexDir(uint64_t u, const Dir& d, bool add) {
  for (const Where& w : d.members) {
    const uint64_t k = MemberKey(w.idx, w.ino);
    if (add) {
      dirs_by_member_[k].push_back(u);
      continue;
    }
    auto it = dirs_by_member_.find(k);
    if (it == dirs_by_member_.end()) continue;
    std::erase(it->second, u);
    if (it->second.empty()) dirs_by_member_.erase(it);
  }
}

void UnionFs::Attach(size_t idx, Filesystem* fs) {
  if (idx >= members_.size()) return;
  std::lock_guard l(listener_mu_);
  if (fs && listener_) fs->SetAttrListener(MemberListener(idx));
  if (fs && entry_listener_) fs->SetEntryListener(MemberEntryListener(idx));
  fs_[idx].store(fs, std::memory_order_release);
}

FsOps::AttrListener UnionFs::MemberListener(size_t idx) const {
  // A directory is told by the union inodes the kernel knows it by: a
  // directory other members hold too is the first holder's (its times,
  // size and link count are what another node's entries in it change).
  return [this, idx, fn = listener_](uint64_t ino, bool data) {
    const std::vector<uint64_t> dirs = UnionDirsOf(idx, ino);
    if (dirs.empty()) fn(Enc(idx, ino), data);
    for (const uint64_t u : dirs) fn(u, data);
  };
}

FsOps::EntryListener UnionFs::MemberEntryListener(size_t idx) const {
  return [this, idx, fn = entry_listener_](uint64_t parent, std::string_view name) {
    for (const uint64_t u : UnionDirsOf(idx, parent)) fn(u, name);
  };
}

std::vector<uint64_t> UnionFs::UnionDirsOf(size_t idx, uint64_t ino) const {
  if (ino == kRoot) return {kRoot};
  std::lock_guard l(mu_);
  auto it = dirs_by_member_.find(MemberKey(idx, ino));
  return it == dirs_by_member_.end() ? std::vector<uint64_t>{} : it->second;
}

uint64_t UnionFs::MemberKey(size_t idx, uint64_t ino) { return (ino << kIdxBits) | idx; }

uint64_t UnionFs::Enc(size_t idx, uint64_t ino) { return ino == kRoot ? kRoot : MemberKey(idx, ino); }

UnionFs::Where UnionFs::Dec(uint64_t u) const {
  if (u == kRoot) return {rw_ >= 0 ? static_cast<size_t>(rw_) : 0, kRoot};
  {
    std::lock_guard l(mu_);
    if (!redirect_.empty()) {
      auto it = redirect_.find(u);
      if (it != redirect_.end()) return it->second;
    }
  }
  return {static_cast<size_t>(u & ((1u << kIdxBits) - 1)), u >> kIdxBits};
}

bool UnionFs::DirMembers(uint64_t u, std::vector<Where>* out, std::string* path) const {
  std::lock_guard l(mu_);
  auto it = dirs_.find(u);
  if (it == dirs_.end()) return false;
  *out = it->second.members;
  if (path) *path = it->second.path;
  return true;
}

void UnionFs::Shadow(const std::string& path, size_t winner, size_t hidden) {
  std::lock_guard l(mu_);
  const std::string what = path + " (" + members_[winner].name + "; hidden in " + members_[hidden].name + ")";
  if (shadowed_paths_.count(what)) return;
  shadowed_++;
  if (shadowed_paths_.size() < 100) shadowed_paths_.insert(what);
  spdlog::info("lmcfs union: {} names {}", path, what);
}

std::vector<const Filesystem*> UnionFs::Filesystems() const {
  std::vector<const Filesystem*> out;
  for (size_t i = 0; i < members_.size(); ++i)
    if (const Filesystem* f = Fs(i)) out.push_back(f);
  return out;
}

std::vector<std::pair<std::string, uint64_t>> UnionFs::NamedCounters() const {
  std::vector<std::pair<std::string, uint64_t>> sum;
  for (const Filesystem* f : Filesystems()) {
    auto c = f->NamedCounters();
    if (sum.empty()) {
      sum = std::move(c);
      continue;
    }
    for (size_t k = 0; k < sum.size() && k < c.size(); ++k) sum[k].second += c[k].second;
  }
  return sum;
}

uint64_t UnionFs::shadowed() const {
  std::lock_guard l(mu_);
  return shadowed_;
}

std::vector<std::string> UnionFs::ShadowedPaths() const {
  std::lock_guard l(mu_);
  return {shadowed_paths_.begin(), shadowed_paths_.end()};
}

int UnionFs::Lookup(uint64_t parent, std::string_view name, struct stat* out) {
  std::vector<Where> dir;
  std::string path;
  if (!DirMembers(parent, &dir, &path)) return ENOTDIR;
  struct Hit {
    Where w;
    struct stat st;
  };
  std::vector<Hit> hits;
  int err = ENOENT;
  for (const Where& d : dir) {
    if (!Fs(d.idx)) continue;
    struct stat st;
    const int r = Fs(d.idx)->Lookup(d.ino, name, &st);
    if (r == 0) {
      hits.push_back({{d.idx, static_cast<uint64_t>(st.st_ino)}, st});
    } else if (r != ENOENT) {
      err = r;
      spdlog::warn("lmcfs union: lookup of {} in member {}: {}", name, members_[d.idx].name,
                   std::strerror(r));
    }
  }
  if (hits.empty()) return err;
  const std::string full = path.empty() ? std::string(name) : path + "/" + std::string(name);
  const Hit& first = hits[0];
  const uint64_t u = Enc(first.w.idx, first.w.ino);
  if (S_ISDIR(first.st.st_mode)) {
    std::vector<Where> merged;
    for (const Hit& h : hits) {
      if (S_ISDIR(h.st.st_mode)) {
        merged.push_back(h.w);
      } else {
        Fs(h.w.idx)->Forget(h.w.ino, 1);
        Shadow(full, first.w.idx, h.w.idx);
      }
    }
    std::lock_guard l(mu_);
    Dir& d = dirs_[u];
    IndexDir(u, d, false);
    d.path = full;
    d.members = merged;
    IndexDir(u, d, true);
    for (const Where& w : merged) d.references[w.idx]++;
  } else {
    for (size_t i = 1; i < hits.size(); ++i) {
      Fs(hits[i].w.idx)->Forget(hits[i].w.ino, 1);
      Shadow(full, first.w.idx, hits[i].w.idx);
    }
    if (rw_ >= 0 && !members_[first.w.idx].writable) {
      std::lock_guard l(mu_);
      lower_files_[u] = {parent, std::string(name)};
    }
  }
  *out = first.st;
  out->st_ino = u;
  return 0;
}

void UnionFs::Forget(uint64_t u, uint64_t nlookup) {
  if (u == kRoot) return;
  {
    std::unique_lock l(mu_);
    auto it = dirs_.find(u);
    if (it != dirs_.end()) {
      std::vector<std::pair<Where, uint64_t>> forget;  // member inode, references to give back
      bool empty = true;
      for (auto& [idx, count] : it->second.references) {
        const uint64_t k = std::min(count, nlookup);
        count -= k;
        if (count) empty = false;
        for (const Where& w : it->second.members)
          if (w.idx == idx && k) forget.push_back({w, k});
      }
      if (empty) {
        IndexDir(u, it->second, false);
        dirs_.erase(it);
      }
      l.unlock();
      for (const auto& [w, k] : forget) Fs(w.idx)->Forget(w.ino, k);
      return;
    }
  }
  const Where w = Dec(u);
  if (w.idx < members_.size() && Fs(w.idx)) Fs(w.idx)->Forget(w.ino, nlookup);
  std::lock_guard l(mu_);
  lower_files_.erase(u);
  if (auto it = redirect_.find(u); it != redirect_.end()) {
    // The kernel's references were to the lower file: give those back
    // there, and the writable file's own one.
    const Where lower{static_cast<size_t>(u & ((1u << kIdxBits) - 1)), u >> kIdxBits};
    if (Fs(lower.idx)) Fs(lower.idx)->Forget(lower.ino, nlookup);
    Fs(it->second.idx)->Forget(it->second.ino, 1);
    redirect_.erase(it);
  }
}

int UnionFs::GetAttr(uint64_t u, struct stat* out) {
  const Where w = Dec(u);
  if (w.idx >= members_.size() || !Fs(w.idx)) return ENOENT;
  const int r = Fs(w.idx)->GetAttr(w.ino, out);
  if (r == 0) out->st_ino = u;
  return r;
}

bool UnionFs::SetAttrListener(AttrListener fn) {
  std::lock_guard l(listener_mu_);
  listener_ = std::move(fn);
  bool ok = true;
  for (size_t i = 0; i < members_.size(); ++i)
    if (Filesystem* f = Fs(i)) ok = f->SetAttrListener(listener_ ? MemberListener(i) : nullptr) && ok;
  return ok;
}

bool UnionFs::SetEntryListener(EntryListener fn) {
  std::lock_guard l(listener_mu_);
  entry_listener_ = std::move(fn);
  bool ok = true;
  for (size_t i = 0; i < members_.size(); ++i)
    if (Filesystem* f = Fs(i))
      ok = f->SetEntryListener(entry_listener_ ? MemberEntryListener(i) : nullptr) && ok;
  return ok;
}

bool UnionFs::TellsAttrOf(uint64_t u) const {
  // A follower's file that a truncating open redirected to the writable
  // member keeps its union inode, which the writable member's notices do
  // not name. The root merges every member's.
  if (u == kRoot) return false;
  std::lock_guard l(mu_);
  return redirect_.count(u) == 0;
}

int UnionFs::Writable(uint64_t u, Where* w) const {
  *w = Dec(u);
  if (w->idx >= members_.size() || !Fs(w->idx)) return ENOENT;
  if (!members_[w->idx].writable) return EROFS;
  return 0;
}

int UnionFs::SetAttr(uint64_t u, const struct stat& in, int mask, struct stat* out) {
  Where w;
  if (int e = Writable(u, &w)) return e;
  const int r = Fs(w.idx)->SetAttr(w.ino, in, mask, out);
  if (r == 0) out->st_ino = u;
  return r;
}

int UnionFs::WritableDir(uint64_t u, uint64_t* ino) {
  if (rw_ < 0) return EROFS;
  const size_t rw = static_cast<size_t>(rw_);
  std::vector<Where> dir;
  std::string path;
  if (!DirMembers(u, &dir, &path)) return ENOTDIR;
  for (const Where& w : dir)
    if (w.idx == rw) {
      *ino = w.ino;
      return 0;
    }
  // The writable member has no such directory yet: make it along the path
  // (each level with the mode and owner of the directory the union shows).
  std::lock_guard cl(copy_up_mu_);
  Filesystem& fs = *Fs(rw);
  struct stat shown;
  if (int e = GetAttr(u, &shown)) return e;
  uint64_t cur = kRoot;
  size_t pos = 0;
  while (pos < path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string::npos) slash = path.size();
    const std::string comp = path.substr(pos, slash - pos);
    pos = slash + 1;
    struct stat st;
    int r = fs.Lookup(cur, comp, &st);
    if (r == ENOENT) {
      Caller c{shown.st_uid, shown.st_gid};
      r = fs.Mkdir(cur, comp, shown.st_mode & 07777, c, &st);
      if (r == 0) spdlog::info("lmcfs union: made directory {} in {} for a write", path, members_[rw].name);
    }
    if (r) return r;
    if (!S_ISDIR(st.st_mode)) {
      fs.Forget(st.st_ino, 1);
      return ENOTDIR;
    }
    if (cur != kRoot) fs.Forget(cur, 1);
    cur = st.st_ino;
  }
  // The last level's reference is the union directory's from now on.
  std::lock_guard l(mu_);
  auto it = dirs_.find(u);
  if (it == dirs_.end()) {
    fs.Forget(cur, 1);
    return ENOENT;
  }
  IndexDir(u, it->second, false);
  it->second.members.insert(it->second.members.begin(), Where{rw, cur});
  IndexDir(u, it->second, true);
  it->second.references[rw]++;
  *ino = cur;
  return 0;
}

int UnionFs::Create(uint64_t parent, std::string_view name, mode_t mode, const Caller& c, struct stat* out) {
  uint64_t p;
  if (int e = WritableDir(parent, &p)) return e;
  const int r = Fs(rw_)->Create(p, name, mode, c, out);
  if (r == 0) out->st_ino = Enc(rw_, out->st_ino);
  return r;
}

int UnionFs::Mknod(uint64_t parent, std::string_view name, mode_t mode, dev_t rdev, const Caller& c,
                   struct stat* out) {
  uint64_t p;
  if (int e = WritableDir(parent, &p)) return e;
  const int r = Fs(rw_)->Mknod(p, name, mode, rdev, c, out);
  if (r == 0) out->st_ino = Enc(rw_, out->st_ino);
  return r;
}

int UnionFs::Mkdir(uint64_t parent, std::string_view name, mode_t mode, const Caller& c, struct stat* out) {
  uint64_t p;
  if (int e = WritableDir(parent, &p)) return e;
  std::string path;
  std::vector<Where> unused;
  DirMembers(parent, &unused, &path);
  const int r = Fs(rw_)->Mkdir(p, name, mode, c, out);
  if (r) return r;
  const uint64_t u = Enc(rw_, out->st_ino);
  out->st_ino = u;
  std::lock_guard l(mu_);
  Dir& d = dirs_[u];
  IndexDir(u, d, false);
  d.path = path.empty() ? std::string(name) : path + "/" + std::string(name);
  d.members = {Where{static_cast<size_t>(rw_), u >> kIdxBits}};
  IndexDir(u, d, true);
  d.references[rw_]++;
  return 0;
}

int UnionFs::Symlink(std::string_view target, uint64_t parent, std::string_view name, const Caller& c,
                     struct stat* out) {
  uint64_t p;
  if (int e = WritableDir(parent, &p)) return e;
  const int r = Fs(rw_)->Symlink(target, p, name, c, out);
  if (r == 0) out->st_ino = Enc(rw_, out->st_ino);
  return r;
}

int UnionFs::Readlink(uint64_t u, std::string* target) {
  const Where w = Dec(u);
  if (w.idx >= members_.size() || !Fs(w.idx)) return ENOENT;
  return Fs(w.idx)->Readlink(w.ino, target);
}

int UnionFs::Link(uint64_t u, uint64_t newparent, std::string_view newname, struct stat* out) {
  Where w;
  if (int e = Writable(u, &w)) return e;
  uint64_t p;
  if (int e = WritableDir(newparent, &p)) return e;
  const int r = Fs(w.idx)->Link(w.ino, p, newname, out);
  if (r == 0) out->st_ino = u;
  return r;
}

int UnionFs::Visible(uint64_t u, std::string_view name, Where* w, struct stat* st) {
  std::vector<Where> dir;
  if (!DirMembers(u, &dir, nullptr)) return ENOTDIR;
  for (const Where& d : dir) {
    if (!Fs(d.idx)) continue;
    const int r = Fs(d.idx)->Lookup(d.ino, name, st);
    if (r == ENOENT) continue;
    if (r) return r;
    Fs(d.idx)->Forget(st->st_ino, 1);
    *w = {d.idx, static_cast<uint64_t>(st->st_ino)};
    return 0;
  }
  return ENOENT;
}

int UnionFs::Unlink(uint64_t parent, std::string_view name) {
  Where w;
  struct stat st;
  if (int e = Visible(parent, name, &w, &st)) return e;
  if (!members_[w.idx].writable) return EROFS;
  uint64_t p;
  if (int e = WritableDir(parent, &p)) return e;
  return Fs(w.idx)->Unlink(p, name);
}

int UnionFs::Rmdir(uint64_t parent, std::string_view name) {
  std::vector<Where> dir;
  if (!DirMembers(parent, &dir, nullptr)) return ENOTDIR;
  // The writable member's directory goes (when empty); if other members
  // hold the directory too it stays visible: EROFS (theirs are their
  // nodes' to remove).
  bool in_rw = false, elsewhere = false;
  for (const Where& d : dir) {
    if (!Fs(d.idx)) continue;
    struct stat st;
    const int r = Fs(d.idx)->Lookup(d.ino, name, &st);
    if (r == ENOENT) continue;
    if (r) return r;
    Fs(d.idx)->Forget(st.st_ino, 1);
    if (!S_ISDIR(st.st_mode)) return members_[d.idx].writable ? ENOTDIR : EROFS;
    (members_[d.idx].writable ? in_rw : elsewhere) = true;
  }
  if (!in_rw) return elsewhere ? EROFS : ENOENT;
  uint64_t p;
  if (int e = WritableDir(parent, &p)) return e;
  if (int e = Fs(rw_)->Rmdir(p, name)) return e;
  if (elsewhere) {
    // The union directory stays, without the writable member's part.
    std::string path;
    std::vector<Where> unused;
    DirMembers(parent, &unused, &path);
    path = path.empty() ? std::string(name) : path + "/" + std::string(name);
    std::lock_guard l(mu_);
    for (auto& [u, d] : dirs_) {
      if (d.path != path) continue;
      IndexDir(u, d, false);
      std::erase_if(d.members, [&](const Where& w) { return w.idx == static_cast<size_t>(rw_); });
      IndexDir(u, d, true);
    }
  }
  return elsewhere ? EROFS : 0;
}

int UnionFs::Rename(uint64_t parent, std::string_view name, uint64_t newparent, std::string_view newname,
                    unsigned flags) {
  Where w;
  struct stat st;
  if (int e = Visible(parent, name, &w, &st)) return e;
  if (!members_[w.idx].writable) return EROFS;
  if (S_ISDIR(st.st_mode)) {
    // A directory other members also hold stays where they have it: the
    // kernel's EXDEV makes mv copy and delete instead.
    std::vector<Where> dir;
    DirMembers(parent, &dir, nullptr);
    for (const Where& d : dir) {
      if (members_[d.idx].writable || !Fs(d.idx)) continue;
      struct stat other;
      if (Fs(d.idx)->Lookup(d.ino, name, &other) == 0) {
        Fs(d.idx)->Forget(other.st_ino, 1);
        return EXDEV;
      }
    }
  }
  uint64_t p, np;
  if (int e = WritableDir(parent, &p)) return e;
  if (int e = WritableDir(newparent, &np)) return e;
  const int r = Fs(rw_)->Rename(p, name, np, newname, flags);
  if (r == 0 && S_ISDIR(st.st_mode)) {
    // Paths of the moved subtree (used to make directories along them).
    std::string from, to;
    std::vector<Where> unused;
    DirMembers(parent, &unused, &from);
    DirMembers(newparent, &unused, &to);
    from = from.empty() ? std::string(name) : from + "/" + std::string(name);
    to = to.empty() ? std::string(newname) : to + "/" + std::string(newname);
    std::lock_guard l(mu_);
    for (auto& [u, d] : dirs_)
      if (d.path == from || d.path.rfind(from + "/", 0) == 0) d.path = to + d.path.substr(from.size());
  }
  return r;
}

int UnionFs::ReadDir(uint64_t u, std::vector<DirEntry>* out) {
  std::vector<Where> dir;
  std::string path;
  if (!DirMembers(u, &dir, &path)) return ENOTDIR;
  out->clear();
  std::unordered_map<std::string, std::pair<size_t, bool>> seen;  // name -> (member, is dir)
  bool first_member = true;
  for (const Where& d : dir) {
    if (!Fs(d.idx)) continue;
    std::vector<DirEntry> entries;
    const int r = Fs(d.idx)->ReadDir(d.ino, &entries);
    if (r) {
      // ENOENT: the node writing that member removed the directory since
      // the lookup here, which is no fault of anyone's.
      spdlog::log(r == ENOENT ? spdlog::level::debug : spdlog::level::warn,
                  "lmcfs union: listing {} in member {}: {}", path, members_[d.idx].name, std::strerror(r));
      if (first_member && &d == &dir.back()) return r;
      continue;
    }
    for (DirEntry& e : entries) {
      if (e.name == "." || e.name == "..") {
        if (first_member) {
          e.ino = e.name == "." ? u : kRoot;
          out->push_back(e);
        }
        continue;
      }
      const bool is_dir = (e.mode & S_IFMT) == S_IFDIR;
      auto [it, fresh] = seen.try_emplace(e.name, d.idx, is_dir);
      if (!fresh) {
        if (!(it->second.second && is_dir))
          Shadow(path.empty() ? e.name : path + "/" + e.name, it->second.first, d.idx);
        continue;
      }
      e.ino = Enc(d.idx, e.ino);
      out->push_back(std::move(e));
    }
    first_member = false;
  }
  return 0;
}

int UnionFs::Open(uint64_t u, int flags) {
  const Where w = Dec(u);
  if (w.idx >= members_.size() || !Fs(w.idx)) return ENOENT;
  if (((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC)) && !members_[w.idx].writable) {
    // Writing over another node's file from the start (O_TRUNC, as every
    // checkpoint save does): the file is made anew in the writable store,
    // and hides the other from here on. Anything else would need its bytes
    // copied first: EROFS.
    std::pair<uint64_t, std::string> where;
    {
      std::lock_guard l(mu_);
      auto it = lower_files_.find(u);
      if (!(flags & O_TRUNC) || (flags & O_ACCMODE) == O_RDONLY || it == lower_files_.end()) return EROFS;
      where = it->second;
    }
    struct stat lower;
    if (int e = Fs(w.idx)->GetAttr(w.ino, &lower)) return e;
    uint64_t p;
    if (int e = WritableDir(where.first, &p)) return e;
    struct stat st;
    int r = Fs(rw_)->Create(p, where.second, lower.st_mode & 07777, Caller{lower.st_uid, lower.st_gid}, &st);
    if (r == EEXIST) {  // made meanwhile: open that one
      r = Fs(rw_)->Lookup(p, where.second, &st);
      if (r == 0) r = Fs(rw_)->Open(st.st_ino, flags);
    }
    if (r) return r;
    std::lock_guard l(mu_);
    redirect_[u] = {static_cast<size_t>(rw_), static_cast<uint64_t>(st.st_ino)};
    lower_files_.erase(u);
    return 0;
  }
  return Fs(w.idx)->Open(w.ino, flags);
}

int UnionFs::Release(uint64_t u, bool writer) {
  const Where w = Dec(u);
  if (w.idx >= members_.size() || !Fs(w.idx)) return ENOENT;
  return Fs(w.idx)->Release(w.ino, writer);
}

int UnionFs::Seek(uint64_t u, uint64_t off, int whence, uint64_t* out) {
  const Where w = Dec(u);
  if (w.idx >= members_.size() || !Fs(w.idx)) return ENOENT;
  return Fs(w.idx)->Seek(w.ino, off, whence, out);
}

int UnionFs::ReadPieces(uint64_t u, uint64_t off, size_t size, std::vector<ReadPiece>* pieces) {
  const Where w = Dec(u);
  if (w.idx >= members_.size() || !Fs(w.idx)) return ENOENT;
  return Fs(w.idx)->ReadPieces(w.ino, off, size, pieces);
}

int UnionFs::Write(uint64_t u, uint64_t off, const void* data, size_t size) {
  Where w;
  if (int e = Writable(u, &w)) return e;
  return Fs(w.idx)->Write(w.ino, off, data, size);
}

int UnionFs::Flush(uint64_t u) {
  const Where w = Dec(u);
  if (w.idx >= members_.size() || !Fs(w.idx)) return ENOENT;
  return members_[w.idx].writable ? Fs(w.idx)->Flush(w.ino) : 0;
}

int UnionFs::Fsync(uint64_t u, bool datasync) {
  const Where w = Dec(u);
  if (w.idx >= members_.size() || !Fs(w.idx)) return ENOENT;
  return members_[w.idx].writable ? Fs(w.idx)->Fsync(w.ino, datasync) : 0;
}

int UnionFs::FsyncDir(uint64_t u) {
  if (rw_ < 0) return 0;
  std::vector<Where> dir;
  if (!DirMembers(u, &dir, nullptr)) return ENOTDIR;
  for (const Where& d : dir)
    if (d.idx == static_cast<size_t>(rw_)) return Fs(rw_)->FsyncDir(d.ino);
  return 0;
}

int UnionFs::CopyRange(uint64_t src, uint64_t soff, uint64_t dst, uint64_t doff, uint64_t len,
                       uint64_t* copied) {
  Where d;
  if (int e = Writable(dst, &d)) return e;
  const Where s = Dec(src);
  // Chunks are shared within one store only: across stores the kernel
  // copies the bytes (EXDEV).
  if (s.idx != d.idx) return EXDEV;
  return Fs(d.idx)->CopyRange(s.ino, soff, d.ino, doff, len, copied);
}

int UnionFs::Fallocate(uint64_t u, int mode, uint64_t off, uint64_t len) {
  Where w;
  if (int e = Writable(u, &w)) return e;
  return Fs(w.idx)->Fallocate(w.ino, mode, off, len);
}

int UnionFs::SetXattr(uint64_t u, std::string_view name, std::string_view value, int flags) {
  Where w;
  if (int e = Writable(u, &w)) return e;
  return Fs(w.idx)->SetXattr(w.ino, name, value, flags);
}

int UnionFs::GetXattr(uint64_t u, std::string_view name, std::string* value) {
  const Where w = Dec(u);
  if (w.idx >= members_.size() || !Fs(w.idx)) return ENOENT;
  if (u == kRoot && name == "user.lmcfs.union") {
    std::string s;
    for (const auto& m : members_) s += m.name + (m.writable ? " (rw)\n" : " (ro)\n");
    s += "shadowed=" + std::to_string(shadowed()) + "\n";
    for (const auto& p : ShadowedPaths()) s += "  " + p + "\n";
    *value = s;
    return 0;
  }
  return Fs(w.idx)->GetXattr(w.ino, name, value);
}

int UnionFs::ListXattr(uint64_t u, std::string* names) {
  const Where w = Dec(u);
  if (w.idx >= members_.size() || !Fs(w.idx)) return ENOENT;
  const int r = Fs(w.idx)->ListXattr(w.ino, names);
  if (r == 0 && u == kRoot) names->append("user.lmcfs.union", sizeof("user.lmcfs.union"));
  return r;
}

int UnionFs::RemoveXattr(uint64_t u, std::string_view name) {
  Where w;
  if (int e = Writable(u, &w)) return e;
  return Fs(w.idx)->RemoveXattr(w.ino, name);
}

int UnionFs::StatFs(struct statvfs* out) { return Fs(Dec(kRoot).idx)->StatFs(out); }

}  // namespace lmc::fs
