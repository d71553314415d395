// Extended attributes: stored in the meta column family under
// "fs/xattr/" + ino u64 BE + name (deleted with the inode), plus the
// virtual read-only user.lmcfs.* attributes.
#include <sys/xattr.h>

#include <cerrno>
#include <cstdio>

#include "fs_impl.h"
#include "lmc/bytes.h"
#include "lmc/store/extent.h"

namespace lmc::fs {

namespace {

constexpr std::string_view kVirtualPrefix = "user.lmcfs.";
constexpr std::string_view kStored = "user.lmcfs.stored_bytes";
constexpr std::string_view kRatio = "user.lmcfs.ratio";
// Incremental snapshots (docs/ARCHITECTURE.md, "Incremental snapshots",
// "Observability"), over the file's committed extents: frame bytes (each
// extent's share of its chunk's frame) of delta and of standalone frames,
// and logical bytes whose chunk another extent (of this or another file)
// references too. References held by delta dependants (a chunk is the base
// of another version) are not sharing and do not count.
constexpr std::string_view kDelta = "user.lmcfs.delta_bytes";
constexpr std::string_view kStandalone = "user.lmcfs.standalone_bytes";
constexpr std::string_view kDedup = "user.lmcfs.dedup_bytes";
// The part of delta_bytes in frames of fp32 chunks stored against their
// bf16 twins (pairing, Store::DerivedFromTwin).
constexpr std::string_view kDerived = "user.lmcfs.derived_bytes";
// On the mount root: background rebases queued or in progress
// (Filesystem::BackgroundPending); 0 once the store is in its final form.
constexpr std::string_view kPendingRebases = "user.lmcfs.pending_rebases";
// On the mount root: the GPU codec path in words (Filesystem::GpuState);
// the per-path counters are lmcfs-stat's.
constexpr std::string_view kGpu = "user.lmcfs.gpu";
constexpr size_t kMaxValue = 64 << 10;

bool Virtual(std::string_view name) { return name.substr(0, kVirtualPrefix.size()) == kVirtualPrefix; }

struct SnapshotBytes {
  double delta = 0, standalone = 0, derived = 0;
  uint64_t dedup = 0;
};

Status CountSnapshotBytes(store::Store* st, uint64_t ino, SnapshotBytes* out) {
  Status inner = Status::Ok();
  Status s =
      st->Scan(store::Cf::kExtents, store::ExtentKeyPrefix(ino), [&](std::string_view, std::string_view v) {
        auto x = store::DecodeExtent(v);
        if (!x || x->hole()) return true;
        auto info = st->GetChunkInfo(x->chunk);
        if (!info.ok()) {
          inner = info.status();
          return false;
        }
        const double share =
            info->decoded_len ? double(info->frame_len) * x->length / info->decoded_len : 0.0;
        (info->base ? out->delta : out->standalone) += share;
        if (info->base) {
          auto d = st->DerivedFromTwin(x->chunk);
          if (!d.ok()) {
            inner = d.status();
            return false;
          }
          if (*d) out->derived += share;
        }
        if (info->refcount > 1) {
          auto deps = st->CountDependants(x->chunk);
          if (!deps.ok()) {
            inner = deps.status();
            return false;
          }
          if (info->refcount > *deps + 1) out->dedup += x->length;
        }
        return true;
      });
  return s.ok() ? inner : s;
}

}  // namespace

std::string XattrPrefix(uint64_t ino) {
  std::string k(kMetaXattrPrefix);
  AppendBE64(&k, ino);
  return k;
}

void Filesystem::SetRootAttributes(RootAttributesFn fn) { root_attributes_ = std::move(fn); }

int Filesystem::GetXattr(uint64_t ino, std::string_view name, std::string* value) {
  Impl& m = *impl_;
  int err = 0;
  InodePtr in = m.Get(ino, &err);
  if (!in) return err;
  if (name == kPendingRebases) {
    if (ino != kRootIno) return ENODATA;
    *value = std::to_string(BackgroundPending());
    return 0;
  }
  if (name == kGpu) {
    if (ino != kRootIno) return ENODATA;
    *value = GpuState();
    return 0;
  }
  if (ino == kRootIno && Virtual(name) && root_attributes_) {
    for (auto& [n, v] : root_attributes_())
      if (name.substr(kVirtualPrefix.size()) == n) {
        *value = std::move(v);
        return 0;
      }
  }
  if (Virtual(name) && (name == kDelta || name == kStandalone || name == kDedup || name == kDerived)) {
    {
      std::lock_guard lk(in->mu);
      if (!in->IsReg()) return ENODATA;
    }
    SnapshotBytes b;
    Status s = CountSnapshotBytes(store_, ino, &b);
    if (!s.ok()) return m.ToErrno(s, "getxattr " + std::string(name), ino);
    const double v = name == kDelta        ? b.delta
                     : name == kStandalone ? b.standalone
                     : name == kDerived    ? b.derived
                                           : double(b.dedup);
    *value = std::to_string(static_cast<uint64_t>(v + 0.5));
    return 0;
  }
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
  if (ino == kRootIno) {
    names->append(kPendingRebases).push_back('\0');
    names->append(kGpu).push_back('\0');
    if (root_attributes_)
      for (const auto& [n, v] : root_attributes_()) names->append(kVirtualPrefix).append(n).push_back('\0');
  }
  if (reg) {
    names->append(kStored).push_back('\0');
    names->append(kRatio).push_back('\0');
    for (auto n : {kDelta, kStandalone, kDedup, kDerived}) names->append(n).push_back('\0');
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
  in->data.pending().Put(store::Cf::kMeta, key, value);
  in->rec_dirty = true;
  return in->data.Commit(false);
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
  in->data.pending().Delete(store::Cf::kMeta, key);
  in->rec_dirty = true;
  return in->data.Commit(false);
}

}  // namespace lmc::fs
