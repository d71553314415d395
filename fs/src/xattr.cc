// Extended attributes: stored in the meta column family under
// "fs/xattr/" + ino u64 BE + name (deleted with the inode), plus the
// virtual read-only user.lmcfs.* attributes.
#include <sys/xattr.h>

#include <cerrno>
#include <cstdio>

#include "fs_impl.h"

namespace lmc::fs {

namespace {

constexpr std::string_view kVirtualPrefix = "user.lmcfs.";
constexpr std::string_view kStored = "user.lmcfs.stored_bytes";
constexpr std::string_view kRatio = "user.lmcfs.ratio";
constexpr size_t kMaxValue = 64 << 10;

bool Virtual(std::string_view name) { return name.substr(0, kVirtualPrefix.size()) == kVirtualPrefix; }

}  // namespace

std::string XattrPrefix(uint64_t ino) {
  std::string k(kMetaXattrPrefix);
  PutBE64(&k, ino);
  return k;
}

int Filesystem::GetXattr(uint64_t ino, std::string_view name, std::string* value) {
  Impl& m = *impl_;
  int err = 0;
  InodePtr in = m.Get(ino, &err);
  if (!in) return err;
  if (Virtual(name)) {
    std::lock_guard lk(in->mu);
    if (!in->IsReg()) return ENODATA;
    if (name == kStored) {
      *value = std::to_string(in->rec.stored);
    } else if (name == kRatio) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.4f",
                    in->rec.size ? double(in->rec.stored) / double(in->rec.size) : 0.0);
      *value = buf;
    } else {
      return ENODATA;
    }
    return 0;
  }
  auto v = store_->Get(store::Cf::kMeta, XattrPrefix(ino) + std::string(name));
  if (!v.ok()) return v.status().IsNotFound() ? ENODATA : m.ToErrno(v.status(), "getxattr", ino);
  *value = std::move(*v);
  return 0;
}

int Filesystem::ListXattr(uint64_t ino, std::string* names) {
  Impl& m = *impl_;
  int err = 0;
  InodePtr in = m.Get(ino, &err);
  if (!in) return err;
  names->clear();
  bool reg;
  {
    std::lock_guard lk(in->mu);
    reg = in->IsReg();
  }
  if (reg) {
    names->append(kStored).push_back('\0');
    names->append(kRatio).push_back('\0');
  }
  std::string prefix = XattrPrefix(ino);
  Status s = store_->Scan(store::Cf::kMeta, prefix, [&](std::string_view k, std::string_view) {
    names->append(k.substr(prefix.size())).push_back('\0');
    return true;
  });
  if (!s.ok()) return m.ToErrno(s, "listxattr", ino);
  return 0;
}

int Filesystem::SetXattr(uint64_t ino, std::string_view name, std::string_view value, int flags) {
  Impl& m = *impl_;
  if (opts_.read_only) return EROFS;
  if (Virtual(name)) return EPERM;
  // POSIX ACLs would be stored but not enforced: refuse them (cp -a and tar
  // then carry on without).
  if (name.substr(0, 7) == "system.") return EOPNOTSUPP;
  if (name.empty() || name.size() > 255) return name.empty() ? EINVAL : ERANGE;
  if (value.size() > kMaxValue) return E2BIG;
  std::unique_lock ns(m.ns_mu);  // serialises the exists-check with the put
  int err = 0;
  InodePtr in = m.Get(ino, &err);
  if (!in) return err;
  std::string key = XattrPrefix(ino) + std::string(name);
  auto v = store_->Get(store::Cf::kMeta, key);
  if (!v.ok() && !v.status().IsNotFound()) return m.ToErrno(v.status(), "setxattr", ino);
  if ((flags & XATTR_CREATE) && v.ok()) return EEXIST;
  if ((flags & XATTR_REPLACE) && !v.ok()) return ENODATA;
  std::lock_guard lk(in->mu);
  in->rec.ctime_ns = NowNs();
  in->pending.Put(store::Cf::kMeta, key, value);
  in->rec_dirty = true;
  return m.CommitLocked(*in, false);
}

int Filesystem::RemoveXattr(uint64_t ino, std::string_view name) {
  Impl& m = *impl_;
  if (opts_.read_only) return EROFS;
  if (Virtual(name)) return EPERM;
  std::unique_lock ns(m.ns_mu);
  int err = 0;
  InodePtr in = m.Get(ino, &err);
  if (!in) return err;
  std::string key = XattrPrefix(ino) + std::string(name);
  auto v = store_->Get(store::Cf::kMeta, key);
  if (!v.ok()) return v.status().IsNotFound() ? ENODATA : m.ToErrno(v.status(), "removexattr", ino);
  std::lock_guard lk(in->mu);
  in->rec.ctime_ns = NowNs();
  in->pending.Delete(store::Cf::kMeta, key);
  in->rec_dirty = true;
  return m.CommitLocked(*in, false);
}

}  // namespace lmc::fs
