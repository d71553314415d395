// libfuse3 low-level adapters (lmc_fs_fuse, with session.cc the only files
// that include a FUSE header). Each callback replies from one Filesystem
// call; Guard turns any stray exception into an error reply.
#include "fuse_ops.h"

#include <fcntl.h>
#include <fuse3/fuse_lowlevel.h>
#include <spdlog/spdlog.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "lmc/fs/filesystem.h"

namespace lmc::fs {

// A directory handle is a snapshot of its entries; readdir offsets index it
// (stable whatever changes meanwhile), and offset 0 refreshes it (rewinddir).
struct DirHandle {
  std::vector<DirEntry> entries;
};

DirHandles::DirHandles() = default;
DirHandles::~DirHandles() = default;

uint64_t DirHandles::Add(std::unique_ptr<DirHandle> h) {
  const uint64_t fh = reinterpret_cast<uint64_t>(h.get());
  std::lock_guard lk(mu_);
  open_.emplace(fh, std::move(h));
  return fh;
}

DirHandle* DirHandles::Get(uint64_t fh) {
  std::lock_guard lk(mu_);
  auto it = open_.find(fh);
  return it == open_.end() ? nullptr : it->second.get();
}

void DirHandles::Remove(uint64_t fh) {
  std::lock_guard lk(mu_);
  open_.erase(fh);
}

namespace {

FuseContext& Ctx(fuse_req_t req) { return *static_cast<FuseContext*>(fuse_req_userdata(req)); }
FsOps& Fs(fuse_req_t req) { return *Ctx(req).fs; }

// Runs fn; on an exception replies with an errno unless fn already replied
// (replied is set by fn just before replying). Ops that never reply
// (forget) pass no_reply.
template <typename Fn>
void Guard(fuse_req_t req, const char* op, Fn&& fn, bool no_reply = false) {
  bool replied = false;
  try {
    fn(replied);
    return;
  } catch (const std::bad_alloc&) {
    spdlog::error("lmcfs: {}: out of memory", op);
    if (!replied && !no_reply) fuse_reply_err(req, ENOMEM);
  } catch (const std::exception& e) {
    spdlog::error("lmcfs: {}: exception: {}", op, e.what());
    if (!replied && !no_reply) fuse_reply_err(req, EIO);
  } catch (...) {
    spdlog::error("lmcfs: {}: unknown exception", op);
    if (!replied && !no_reply) fuse_reply_err(req, EIO);
  }
  if (no_reply && !replied) fuse_reply_none(req);
}

// Seconds the kernel may keep st (FuseContext::attr_timeout says why).
double AttrTimeout(fuse_req_t req, const struct stat& st) {
  const FuseContext& c = Ctx(req);
  if (S_ISDIR(st.st_mode)) return c.dir_attr_timeout;
  return c.attr_timeout > 0 && c.fs->TellsAttrOf(st.st_ino) ? c.attr_timeout : 0.0;
}

void ReplyEntry(fuse_req_t req, const struct stat& st) {
  fuse_entry_param e{};
  e.ino = st.st_ino;
  e.generation = 0;  // inode numbers are never reused; the root must keep 0
  e.attr = st;
  e.attr_timeout = AttrTimeout(req, st);
  e.entry_timeout = Ctx(req).entry_timeout;
  fuse_reply_entry(req, &e);
}

Caller CallerOf(fuse_req_t req) {
  const fuse_ctx* c = fuse_req_ctx(req);
  return {c->uid, c->gid};
}

void Init(void* userdata, fuse_conn_info* conn) {
  auto* ctx = static_cast<FuseContext*>(userdata);
  // Big writes: the kernel sends up to max_write bytes per request (1 MiB,
  // its limit here); fewer, larger requests feed the chunker efficiently.
  conn->max_write = ctx->max_write;
  conn->max_read = 0;
  // Let the kernel clear setuid/setgid on write/truncate/chown (we do not).
  conn->want &= ~FUSE_CAP_HANDLE_KILLPRIV;
  // No writeback cache (docs/ARCHITECTURE.md, "FUSE settings"):
  // with it the kernel sends
  // pages in writeback order, not the program's, which stops the stream
  // (tensor-aligned, typed chunks) at the first out-of-order page and costs
  // ratio; it would also own size and mtime and send reads on write-only
  // handles. Writes return before encoding (the pipeline buffers them), so
  // the cache would only save the per-request cost of 1 MiB requests.
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
  if (conn->capable & FUSE_CAP_SPLICE_READ) conn->want &= ~FUSE_CAP_SPLICE_READ;
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  SetReadAheadOnce(Ctx(req));
  Guard(req, "lookup", [&](bool& r) {
    struct stat st;
    int err = Fs(req).Lookup(parent, name, &st);
    r = true;
    if (err) {
      fuse_reply_err(req, err);
    } else {
      ReplyEntry(req, st);
    }
  });
}

void Forget(fuse_req_t req, fuse_ino_t ino, uint64_t n) {
  Guard(
      req, "forget",
      [&](bool& r) {
        Fs(req).Forget(ino, n);
        r = true;
        fuse_reply_none(req);
      },
      true);
}

void ForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* f) {
  Guard(
      req, "forget",
      [&](bool& r) {
        for (size_t i = 0; i < count; i++) Fs(req).Forget(f[i].ino, f[i].nlookup);
        r = true;
        fuse_reply_none(req);
      },
      true);
}

void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  Guard(req, "getattr", [&](bool& r) {
    struct stat st;
    int err = Fs(req).GetAttr(ino, &st);
    r = true;
    if (err) {
      fuse_reply_err(req, err);
    } else {
      fuse_reply_attr(req, &st, AttrTimeout(req, st));
    }
  });
}

void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info*) {
  Guard(req, "setattr", [&](bool& r) {
    int mask = 0;
    if (to_set & FUSE_SET_ATTR_MODE) mask |= kSetMode;
    if (to_set & FUSE_SET_ATTR_UID) mask |= kSetUid;
    if (to_set & FUSE_SET_ATTR_GID) mask |= kSetGid;
    if (to_set & FUSE_SET_ATTR_SIZE) mask |= kSetSize;
    if (to_set & FUSE_SET_ATTR_ATIME) mask |= kSetAtime;
    if (to_set & FUSE_SET_ATTR_MTIME) mask |= kSetMtime;
    if (to_set & FUSE_SET_ATTR_ATIME_NOW) mask |= kSetAtimeNow;
    if (to_set & FUSE_SET_ATTR_MTIME_NOW) mask |= kSetMtimeNow;
    if (to_set & FUSE_SET_ATTR_CTIME) mask |= kSetCtime;
    struct stat st;
    int err = Fs(req).SetAttr(ino, *attr, mask, &st);
    r = true;
    if (err) {
      fuse_reply_err(req, err);
    } else {
      fuse_reply_attr(req, &st, AttrTimeout(req, st));
    }
  });
}

void Readlink(fuse_req_t req, fuse_ino_t ino) {
  Guard(req, "readlink", [&](bool& r) {
    std::string t;
    int err = Fs(req).Readlink(ino, &t);
    r = true;
    if (err) {
      fuse_reply_err(req, err);
    } else {
      fuse_reply_readlink(req, t.c_str());
    }
  });
}

template <typename Fn>
void EntryOp(fuse_req_t req, const char* op, Fn&& fn) {
  Guard(req, op, [&](bool& r) {
    struct stat st;
    int err = fn(&st);
    r = true;
    if (err) {
      fuse_reply_err(req, err);
    } else {
      ReplyEntry(req, st);
    }
  });
}

void Mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  EntryOp(req, "mknod",
          [&](struct stat* st) { return Fs(req).Mknod(parent, name, mode, rdev, CallerOf(req), st); });
}

void Mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  EntryOp(req, "mkdir",
          [&](struct stat* st) { return Fs(req).Mkdir(parent, name, mode, CallerOf(req), st); });
}

void Symlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  EntryOp(req, "symlink",
          [&](struct stat* st) { return Fs(req).Symlink(link, parent, name, CallerOf(req), st); });
}

void Link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  EntryOp(req, "link", [&](struct stat* st) { return Fs(req).Link(ino, newparent, newname, st); });
}

template <typename Fn>
void ErrOp(fuse_req_t req, const char* op, Fn&& fn) {
  Guard(req, op, [&](bool& r) {
    int err = fn();
    r = true;
    fuse_reply_err(req, err);
  });
}

void Unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  ErrOp(req, "unlink", [&] { return Fs(req).Unlink(parent, name); });
}

void Rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  ErrOp(req, "rmdir", [&] { return Fs(req).Rmdir(parent, name); });
}

void Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent, const char* newname,
            unsigned flags) {
  ErrOp(req, "rename", [&] { return Fs(req).Rename(parent, name, newparent, newname, flags); });
}

// The kernel keeps a file's cached pages across opens (FOPEN_KEEP_CACHE):
// a re-read of a file unchanged since it was read goes at page-cache speed
// instead of decoding again. Every change of a file's bytes reaches the
// daemon through this kernel mount, which updates or drops its pages
// itself: write (write-through, the pages hold what was written),
// truncate and O_TRUNC opens (truncate_pagecache), copy_file_range (the
// destination range is dropped); renames and unlinks change which inode a
// name opens; a remount starts with an empty cache. With
// FUSE_CAP_AUTO_INVAL_DATA (libfuse's default) the kernel also drops them
// when it sees the file's mtime or size change.
//
// Write-only handles (torch.save, safetensors and most checkpoint writers
// open 'wb') go around the page cache (FOPEN_DIRECT_IO): the kernel hands
// the writer's own pages to the daemon instead of first copying them into
// page-cache pages, which costs the writer a copy and a page allocation per
// page and fills the cache with a checkpoint nobody reads yet. A write-only
// descriptor cannot be mmapped, so direct I/O changes nothing for mappings;
// pages other opens cached are dropped on their next read, when the kernel
// sees the new mtime (FUSE_CAP_AUTO_INVAL_DATA: each write drops the
// kernel's copy of the file's attributes, so that read asks again).
void SetCacheMode(fuse_file_info* fi) {
  fi->keep_cache = 1;
  if ((fi->flags & O_ACCMODE) == O_WRONLY) fi->direct_io = 1;
}

void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  SetReadAheadOnce(Ctx(req));
  Guard(req, "open", [&](bool& r) {
    int err = Fs(req).Open(ino, fi->flags);
    r = true;
    if (err) {
      fuse_reply_err(req, err);
      return;
    }
    // All data state is per inode; fh only remembers whether this handle
    // may have written, so that closing a reader does not cut a writer's
    // stream short.
    fi->fh = (fi->flags & O_ACCMODE) != O_RDONLY;
    // A reader's close has nothing to flush (Flush below does nothing for
    // it): the kernel skips the FLUSH round trip (FOPEN_NOFLUSH).
    if (!fi->fh) fi->noflush = 1;
    SetCacheMode(fi);
    if (fuse_reply_open(req, fi) == -ENOENT) Fs(req).Release(ino, fi->fh != 0);  // interrupted open
  });
}

void Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
  SetReadAheadOnce(Ctx(req));
  Guard(req, "create", [&](bool& r) {
    struct stat st;
    int err = Fs(req).Create(parent, name, mode, CallerOf(req), &st);
    r = true;
    if (err) {
      fuse_reply_err(req, err);
      return;
    }
    fuse_entry_param e{};
    e.ino = st.st_ino;
    e.attr = st;
    e.attr_timeout = AttrTimeout(req, st);
    e.entry_timeout = Ctx(req).entry_timeout;
    fi->fh = 1;
    SetCacheMode(fi);
    if (fuse_reply_create(req, &e, fi) == -ENOENT) {
      Fs(req).Release(st.st_ino, true);
      Fs(req).Forget(st.st_ino, 1);
    }
  });
}

// libfuse adds its header to the reply's iovec; writev takes at most IOV_MAX.
constexpr size_t kMaxReplyIov = 512;

// Zeros for holes in read replies.
const uint8_t* Zeros(size_t* n) {
  static const std::vector<uint8_t> zeros(size_t{1} << 20);
  *n = zeros.size();
  return zeros.data();
}

// The reply's bytes go from the decoded chunks straight into the kernel
// (one writev of an iovec): no copy into a reply buffer, no zero fill.
void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  Guard(req, "read", [&](bool& r) {
    std::vector<ReadPiece> pieces;  // their owners keep the bytes alive until replied
    int err = Fs(req).ReadPieces(ino, static_cast<uint64_t>(off), size, &pieces);
    if (err) {
      r = true;
      fuse_reply_err(req, err);
      return;
    }
    std::vector<iovec> iov;
    iov.reserve(pieces.size() + 1);
    for (const auto& p : pieces) {
      if (p.data) {
        iov.push_back({const_cast<uint8_t*>(p.data), p.size});
        continue;
      }
      size_t zn;
      const uint8_t* z = Zeros(&zn);
      for (size_t left = p.size; left > 0;) {
        const size_t k = std::min(left, zn);
        iov.push_back({const_cast<uint8_t*>(z), k});
        left -= k;
      }
    }
    if (iov.size() > kMaxReplyIov) {
      // A patchwork of small extents: one buffer (writev takes at most IOV_MAX).
      std::string flat;
      flat.reserve(size);
      for (const iovec& v : iov) flat.append(static_cast<const char*>(v.iov_base), v.iov_len);
      r = true;
      fuse_reply_buf(req, flat.data(), flat.size());
      return;
    }
    r = true;
    fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));
  });
}

void Write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off, fuse_file_info*) {
  Guard(req, "write", [&](bool& r) {
    int err = Fs(req).Write(ino, static_cast<uint64_t>(off), buf, size);
    r = true;
    if (err) {
      fuse_reply_err(req, err);
    } else {
      fuse_reply_write(req, size);
    }
  });
}

// flush comes with every close() of a handle that may have written
// (readers' opens ask for none); its error is what close() returns, so the
// data is finalized here, not in release: release comes after close()
// returned, its error is discarded, and a rename or open can overtake it.
void Flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  ErrOp(req, "flush", [&] { return fi->fh ? Fs(req).Flush(ino) : 0; });
}

void Release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  ErrOp(req, "release", [&] { return Fs(req).Release(ino, fi->fh != 0); });
}

// SEEK_DATA and SEEK_HOLE (the kernel answers SEEK_SET, SEEK_CUR and
// SEEK_END itself): cp and tar --sparse skip a file's holes instead of
// reading zeros (Filesystem::Seek).
void Lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, fuse_file_info*) {
  Guard(req, "lseek", [&](bool& r) {
    uint64_t pos = 0;
    int err = off < 0 ? ENXIO : Fs(req).Seek(ino, static_cast<uint64_t>(off), whence, &pos);
    r = true;
    if (err) {
      fuse_reply_err(req, err);
    } else {
      fuse_reply_lseek(req, static_cast<off_t>(pos));
    }
  });
}

void Fsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info*) {
  ErrOp(req, "fsync", [&] { return Fs(req).Fsync(ino, datasync != 0); });
}

void OpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Guard(req, "opendir", [&](bool& r) {
    auto h = std::make_unique<DirHandle>();
    int err = Fs(req).ReadDir(ino, &h->entries);
    r = true;
    if (err) {
      fuse_reply_err(req, err);
      return;
    }
    fi->fh = Ctx(req).dirs.Add(std::move(h));
    if (fuse_reply_open(req, fi) != 0) Ctx(req).dirs.Remove(fi->fh);
  });
}

void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  Guard(req, "readdir", [&](bool& r) {
    DirHandle* h = Ctx(req).dirs.Get(fi->fh);
    if (!h) {  // not one we gave out: the kernel's handles come from opendir
      r = true;
      fuse_reply_err(req, EBADF);
      return;
    }
    if (off == 0) {
      int err = Fs(req).ReadDir(ino, &h->entries);
      if (err) {
        r = true;
        fuse_reply_err(req, err);
        return;
      }
    }
    std::string buf(size, '\0');
    size_t used = 0;
    for (size_t i = static_cast<size_t>(off); i < h->entries.size(); i++) {
      const DirEntry& e = h->entries[i];
      struct stat st {};
      st.st_ino = e.ino;
      st.st_mode = e.mode;
      size_t n = fuse_add_direntry(req, buf.data() + used, size - used, e.name.c_str(), &st,
                                   static_cast<off_t>(i + 1));
      if (n > size - used) break;
      used += n;
    }
    r = true;
    fuse_reply_buf(req, buf.data(), used);
  });
}

void ReleaseDir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  Ctx(req).dirs.Remove(fi->fh);
  fuse_reply_err(req, 0);
}

void FsyncDir(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
  ErrOp(req, "fsyncdir", [&] { return Fs(req).FsyncDir(ino); });
}

void StatFs(fuse_req_t req, fuse_ino_t) {
  Guard(req, "statfs", [&](bool& r) {
    struct statvfs st;
    int err = Fs(req).StatFs(&st);
    r = true;
    if (err) {
      fuse_reply_err(req, err);
    } else {
      fuse_reply_statfs(req, &st);
    }
  });
}

void SetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size, int flags) {
  ErrOp(req, "setxattr", [&] { return Fs(req).SetXattr(ino, name, {value, size}, flags); });
}

// getxattr/listxattr: size 0 asks for the length; a short buffer is ERANGE.
void ReplyXattr(fuse_req_t req, int err, const std::string& v, size_t size) {
  if (err) {
    fuse_reply_err(req, err);
  } else if (size == 0) {
    fuse_reply_xattr(req, v.size());
  } else if (size < v.size()) {
    fuse_reply_err(req, ERANGE);
  } else {
    fuse_reply_buf(req, v.data(), v.size());
  }
}

void GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  Guard(req, "getxattr", [&](bool& r) {
    std::string v;
    int err = Fs(req).GetXattr(ino, name, &v);
    r = true;
    ReplyXattr(req, err, v, size);
  });
}

void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  Guard(req, "listxattr", [&](bool& r) {
    std::string v;
    int err = Fs(req).ListXattr(ino, &v);
    r = true;
    ReplyXattr(req, err, v, size);
  });
}

void RemoveXattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  ErrOp(req, "removexattr", [&] { return Fs(req).RemoveXattr(ino, name); });
}

// Shares chunks instead of copying bytes (cp uses copy_file_range).
void CopyFileRange(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, fuse_file_info*, fuse_ino_t ino_out,
                   off_t off_out, fuse_file_info*, size_t len, int flags) {
  Guard(req, "copy_file_range", [&](bool& r) {
    uint64_t copied = 0;
    int err = flags ? EINVAL
                    : Fs(req).CopyRange(ino_in, static_cast<uint64_t>(off_in), ino_out,
                                        static_cast<uint64_t>(off_out), len, &copied);
    r = true;
    if (err) {
      fuse_reply_err(req, err);
    } else {
      fuse_reply_write(req, static_cast<size_t>(copied));
    }
  });
}

void Fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len, fuse_file_info*) {
  ErrOp(req, "fallocate", [&] {
    return off < 0 || len <= 0
               ? EINVAL
               : Fs(req).Fallocate(ino, mode, static_cast<uint64_t>(off), static_cast<uint64_t>(len));
  });
}

fuse_lowlevel_ops MakeOps() {
  fuse_lowlevel_ops o{};
  o.init = Init;
  o.lookup = Lookup;
  o.forget = Forget;
  o.forget_multi = ForgetMulti;
  o.getattr = GetAttr;
  o.setattr = SetAttr;
  o.readlink = Readlink;
  o.mknod = Mknod;
  o.mkdir = Mkdir;
  o.symlink = Symlink;
  o.link = Link;
  o.unlink = Unlink;
  o.rmdir = Rmdir;
  o.rename = Rename;
  o.open = Open;
  o.create = Create;
  o.read = Read;
  o.write = Write;
  o.flush = Flush;
  o.release = Release;
  o.fsync = Fsync;
  o.opendir = OpenDir;
  o.readdir = ReadDir;
  o.releasedir = ReleaseDir;
  o.fsyncdir = FsyncDir;
  o.statfs = StatFs;
  o.setxattr = SetXattr;
  o.getxattr = GetXattr;
  o.listxattr = ListXattr;
  o.removexattr = RemoveXattr;
  o.copy_file_range = CopyFileRange;
  o.lseek = Lseek;
  o.fallocate = Fallocate;
  return o;
}

}  // namespace

// A path as /proc/self/mountinfo writes it (space, tab, newline and
// backslash as octal escapes).
static std::string MountinfoEscape(const std::string& path) {
  std::string out;
  for (char c : path) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\\') {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\%03o", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

void SetReadAheadOnce(FuseContext& ctx) {
  if (ctx.read_ahead_kb == 0 || ctx.read_ahead_set.load(std::memory_order_relaxed) ||
      ctx.read_ahead_set.exchange(true))
    return;
  const std::string point_escaped = MountinfoEscape(ctx.mountpoint);
  std::ifstream mi("/proc/self/mountinfo");
  std::string line, dev;
  while (std::getline(mi, line)) {
    // id parent major:minor root mountpoint options ... - fstype source ...
    std::istringstream in(line);
    std::string id, parent, mm, root, point;
    in >> id >> parent >> mm >> root >> point;
    if (point == point_escaped && line.find(" - fuse.lmcfs ") != std::string::npos) dev = mm;  // last wins
  }
  if (dev.empty()) return;
  const std::string path = "/sys/class/bdi/" + dev + "/read_ahead_kb";
  std::ofstream f(path);
  f << ctx.read_ahead_kb << "\n";
  f.flush();
  if (!f) {
    spdlog::debug("lmcfs: cannot set {} to {} (not root?); the kernel's default read-ahead stays", path,
                  ctx.read_ahead_kb);
  } else {
    spdlog::debug("lmcfs: read-ahead of {} set to {} KiB", ctx.mountpoint, ctx.read_ahead_kb);
  }
}

const fuse_lowlevel_ops& LowLevelOps() {
  static const fuse_lowlevel_ops ops = MakeOps();
  return ops;
}

}  // namespace lmc::fs
