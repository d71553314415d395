// A union of filesystems, one per store (docs/ARCHITECTURE.md, "Stores in
// RADOS", "The union"): what `mount.lmcfs rados:POOL/A,B,C /ckpt -o rw=A`
// serves. Directories merge by path; writes go to the one writable member
// (its directories are made along the path as needed); the others are
// read-only followers of stores other nodes write.
//
// The rule for a name that several members hold at one path: the member
// named first wins (the writable one is always first). A directory wins
// over nothing: if the first holder is a directory, the directories of the
// same name in later members merge under it and their files of that name
// are hidden; if it is a file, every later holder is hidden. Hidden names
// are counted (shadowed()) and listed (ShadowedPaths()).
//
// Inode numbers: the member's inode << 8 | the member's index (the root
// is 1). Thread safety: all methods, from any number of threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "lmc/fs/filesystem.h"

namespace lmc::fs {

struct UnionMember {
  std::string name;  // the store's name (NAME of rados:POOL/NAME)
  // nullptr: not there yet (a store whose node has not written it yet);
  // Attach adds it later.
  Filesystem* fs = nullptr;
  bool writable = false;
};

class UnionFs final : public FsOps {
 public:
  // members: in priority order; the writable one, if any, first. At most
  // 255. The filesystems must outlive the union.
  explicit UnionFs(std::vector<UnionMember> members);

  int Lookup(uint64_t parent, std::string_view name, struct stat* out) override;
  void Forget(uint64_t ino, uint64_t nlookup) override;
  int GetAttr(uint64_t ino, struct stat* out) override;
  int SetAttr(uint64_t ino, const struct stat& in, int mask, struct stat* out) override;
  int Create(uint64_t parent, std::string_view name, mode_t mode, const Caller& c, struct stat* out) override;
  int Mknod(uint64_t parent, std::string_view name, mode_t mode, dev_t rdev, const Caller& c,
            struct stat* out) override;
  int Mkdir(uint64_t parent, std::string_view name, mode_t mode, const Caller& c, struct stat* out) override;
  int Symlink(std::string_view target, uint64_t parent, std::string_view name, const Caller& c,
              struct stat* out) override;
  int Readlink(uint64_t ino, std::string* target) override;
  int Link(uint64_t ino, uint64_t newparent, std::string_view newname, struct stat* out) override;
  int Unlink(uint64_t parent, std::string_view name) override;
  int Rmdir(uint64_t parent, std::string_view name) override;
  int Rename(uint64_t parent, std::string_view name, uint64_t newparent, std::string_view newname,
             unsigned flags) override;
  int ReadDir(uint64_t ino, std::vector<DirEntry>* out) override;
  int Open(uint64_t ino, int flags) override;
  int Release(uint64_t ino, bool writer) override;
  int Seek(uint64_t ino, uint64_t off, int whence, uint64_t* out) override;
  int ReadPieces(uint64_t ino, uint64_t off, size_t size, std::vector<ReadPiece>* pieces) override;
  int Write(uint64_t ino, uint64_t off, const void* data, size_t size) override;
  int Flush(uint64_t ino) override;
  int Fsync(uint64_t ino, bool datasync) override;
  int FsyncDir(uint64_t ino) override;
  int CopyRange(uint64_t src, uint64_t soff, uint64_t dst, uint64_t doff, uint64_t len,
                uint64_t* copied) override;
  int Fallocate(uint64_t ino, int mode, uint64_t off, uint64_t len) override;
  int SetXattr(uint64_t ino, std::string_view name, std::string_view value, int flags) override;
  int GetXattr(uint64_t ino, std::string_view name, std::string* value) override;
  int ListXattr(uint64_t ino, std::string* names) override;
  int RemoveXattr(uint64_t ino, std::string_view name) override;
  int StatFs(struct statvfs* out) override;
  // Every member's listener (a member attached later's too), its inode
  // numbers made the union's: the writable member tells of the changes it
  // makes on its own, the followers of another node's (the mount calls
  // Filesystem::FollowerRefreshed after each refresh). False if a member
  // cannot tell.
  bool SetAttrListener(AttrListener fn) override;
  bool TellsAttrOf(uint64_t ino) const override;
  // Every member's entry listener, each directory named by the union inode
  // the kernel knows it by (a directory several members hold is the first
  // holder's); an entry of a directory the union has not handed to the
  // kernel is not told (nothing of it is cached).
  bool SetEntryListener(EntryListener fn) override;

  // Member idx's filesystem, once it is there (see UnionMember::fs).
  void Attach(size_t idx, Filesystem* fs);

  // The members' filesystems that are there, in priority order.
  std::vector<const Filesystem*> Filesystems() const;
  // Filesystem::NamedCounters summed over Filesystems(): the union's
  // reads of another node's files are counted by that member's filesystem.
  std::vector<std::pair<std::string, uint64_t>> NamedCounters() const;

  // Names hidden by the rule above, as lookups and listings met them.
  uint64_t shadowed() const;
  std::vector<std::string> ShadowedPaths() const;  // at most 100, "dir/name (member: hidden in member)"
  const std::vector<UnionMember>& members() const { return members_; }

 private:
  struct Where {
    size_t idx;
    uint64_t ino;
  };
  struct Dir {
    std::string path;                       // from the root, "" for the root
    std::vector<Where> members;             // priority order
    std::map<size_t, uint64_t> references;  // member index -> lookups taken there for the kernel
  };
  static uint64_t Enc(size_t idx, uint64_t ino);
  // Member idx's inode ino as one number (Enc but for the root, which every
  // member's root encodes to): the key of dirs_by_member_.
  static uint64_t MemberKey(size_t idx, uint64_t ino);
  // Where union inode u lives (a redirect first).
  Where Dec(uint64_t u) const;
  // The members of directory u (priority order); false if u is not a
  // directory the union knows.
  bool DirMembers(uint64_t u, std::vector<Where>* out, std::string* path) const;
  // The writable member's inode of directory u, made along its path when
  // the writable member has none yet. 0 or an errno.
  int WritableDir(uint64_t u, uint64_t* ino);
  // Which member holds the visible entry `name` in directory u: first hit.
  int Visible(uint64_t u, std::string_view name, Where* w, struct stat* st);
  void Shadow(const std::string& path, size_t winner, size_t hidden);
  // The member of u for a change: EROFS unless it is the writable one.
  int Writable(uint64_t u, Where* w) const;

  // Member idx's filesystem, nullptr while it is not there.
  Filesystem* Fs(size_t idx) const { return fs_[idx].load(std::memory_order_acquire); }
  // listener_ and entry_listener_ for member idx's inode numbers
  // (listener_mu_ held).
  AttrListener MemberListener(size_t idx) const;
  EntryListener MemberEntryListener(size_t idx) const;
  // The union inodes the kernel may know member idx's directory ino by
  // (a later lookup after the writable member made it too names it by
  // that member's inode): none if the union handed no such directory out.
  std::vector<uint64_t> UnionDirsOf(size_t idx, uint64_t ino) const;
  // Adds u to (add) or takes it from dirs_by_member_ under each of d's
  // members (mu_ held): every change to a Dir's members goes between a
  // call with false and one with true.
  void IndexDir(uint64_t u, const Dir& d, bool add);

  std::vector<UnionMember> members_;
  std::unique_ptr<std::atomic<Filesystem*>[]> fs_;
  int rw_ = -1;  // index of the writable member
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Dir> dirs_;
  // The union directories each member directory is part of, by its
  // MemberKey: UnionDirsOf in one lookup, where every
  // attribute notice of a follower's refresh used to scan dirs_.
  std::unordered_map<uint64_t, std::vector<uint64_t>> dirs_by_member_;
  // Files of read-only members the kernel looked up, by union inode: where
  // they are (parent directory, name), for a truncating open.
  std::unordered_map<uint64_t, std::pair<uint64_t, std::string>> lower_files_;
  // Union inodes of read-only members' files opened with O_TRUNC for
  // writing: the writable member's new file of the same name now answers
  // for them (its one lookup reference is given back with the union's).
  std::unordered_map<uint64_t, Where> redirect_;
  uint64_t shadowed_ = 0;
  std::set<std::string> shadowed_paths_;
  std::mutex copy_up_mu_;
  std::mutex listener_mu_;  // Set*Listener and Attach: guards the listeners
  AttrListener listener_;
  EntryListener entry_listener_;
};

}  // namespace lmc::fs
