// RadosEnv: the store's Env over the objects of one RADOS namespace
// (lmc/store/rados.h; docs/ARCHITECTURE.md, "Stores in RADOS").
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "lmc/store/rados.h"

#ifdef LMC_HAVE_RADOS
#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <rados/librados.hpp>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "format.h"
#endif

namespace lmc::store {

namespace {
constexpr std::string_view kPrefix = "rados:";

bool ValidName(std::string_view s) {
  if (s.empty() || s.size() > 200 || s == "." || s == "..") return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  return true;
}
}  // namespace

bool IsRadosSpec(std::string_view store) { return store.substr(0, kPrefix.size()) == kPrefix; }

Result<RadosSpec> ParseRadosSpec(std::string_view store) {
  if (!IsRadosSpec(store))
    return Status::InvalidArgument(std::string(store) + " is not a rados:POOL/NAME store");
  std::string_view rest = store.substr(kPrefix.size());
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos || !ValidName(rest.substr(0, slash)) ||
      !ValidName(rest.substr(slash + 1)))
    return Status::InvalidArgument("bad RADOS store '" + std::string(store) +
                                   "': write rados:POOL/NAME (letters, digits, '.', '_' and '-' in each)");
  return RadosSpec{std::string(rest.substr(0, slash)), std::string(rest.substr(slash + 1))};
}

Result<std::pair<std::string, std::vector<std::string>>> ParseRadosUnion(std::string_view spec) {
  if (!IsRadosSpec(spec))
    return Status::InvalidArgument(std::string(spec) + " is not a rados:POOL/NAME,... union");
  std::string_view rest = spec.substr(kPrefix.size());
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos || !ValidName(rest.substr(0, slash)))
    return Status::InvalidArgument("bad RADOS union '" + std::string(spec) +
                                   "': write rados:POOL/NAME1,NAME2,...");
  std::vector<std::string> names;
  std::string_view list = rest.substr(slash + 1);
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string_view::npos) comma = list.size();
    const std::string_view n = list.substr(pos, comma - pos);
    if (!ValidName(n))
      return Status::InvalidArgument("bad store name '" + std::string(n) + "' in RADOS union '" +
                                     std::string(spec) + "' (letters, digits, '.', '_' and '-')");
    for (const auto& m : names)
      if (m == n)
        return Status::InvalidArgument("store " + m + " is named twice in '" + std::string(spec) + "'");
    names.emplace_back(n);
    pos = comma + 1;
  }
  if (names.size() < 2) return Status::InvalidArgument(std::string(spec) + " names one store, not a union");
  if (names.size() > 255)
    return Status::InvalidArgument(std::string(spec) + ": a union has at most 255 stores");
  return std::make_pair(std::string(rest.substr(0, slash)), std::move(names));
}

std::string DefaultLocalDir(const RadosSpec& spec) {
  std::string base;
  if (geteuid() == 0) {
    base = "/var/cache/lmcfs";
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    base = std::string(x) + "/lmcfs";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    base = std::string(h) + "/.cache/lmcfs";
  } else {
    base = "/tmp/lmcfs-" + std::to_string(geteuid());
  }
  return base + "/rados/" + spec.pool + "/" + spec.name;
}

std::string LocalDirOf(const std::string& store) {
  if (!IsRadosSpec(store)) return store;
  auto spec = ParseRadosSpec(store.substr(0, store.find(',')));
  return spec.ok() ? DefaultLocalDir(*spec) : store;
}

Result<PoolSpace> PoolSpaceOf(std::string_view df_json, std::string_view quota_json, std::string_view pool) {
  using json = nlohmann::json;
  const json df = json::parse(df_json, nullptr, false);
  const json quota = json::parse(quota_json, nullptr, false);
  if (!df.is_object() || !quota.is_object())
    return Status::Corruption("the Ceph monitors' answer to df or osd pool get-quota is not JSON");
  auto u64 = [](const json& j, const char* key) -> uint64_t {
    auto it = j.find(key);
    return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
  };
  const json* stats = nullptr;
  if (auto pools = df.find("pools"); pools != df.end() && pools->is_array())
    for (const json& p : *pools)
      if (p.is_object() && p.value("name", std::string()) == pool && p.contains("stats") &&
          p["stats"].is_object())
        stats = &p["stats"];
  const uint64_t max_bytes = u64(quota, "quota_max_bytes");
  if (!stats && max_bytes == 0)
    return Status::NotFound("the Ceph cluster reports no space figures for pool " + std::string(pool) +
                            " (no manager daemon runs? ceph -s)");
  // Pacific and later name the bytes stored "stored"; "bytes_used" counts
  // the replicas too.
  const uint64_t stored =
      stats ? (stats->contains("stored") ? u64(*stats, "stored") : u64(*stats, "bytes_used"))
            : u64(quota, "current_num_bytes");
  PoolSpace s;
  s.avail = stats ? u64(*stats, "max_avail") : UINT64_MAX;
  if (max_bytes > 0) s.avail = std::min(s.avail, max_bytes > stored ? max_bytes - stored : 0);
  s.total = stored + s.avail;
  return s;
}

#ifndef LMC_HAVE_RADOS

namespace {
Status NoRados(const std::string& what) {
  return Status::Unsupported(what +
                             "this lmcfs was built without Ceph RADOS support; install librados-dev and "
                             "libradospp-dev (scripts/install-deps.sh) and rebuild");
}
}  // namespace

Result<std::shared_ptr<RadosClient>> RadosClient::Connect(const RadosOptions&) { return NoRados(""); }

Result<std::unique_ptr<RadosEnv>> RadosEnv::Open(const std::string& store, const RadosOptions&) {
  return NoRados("store " + store + ": ");
}

#else

namespace {

constexpr char kEndAttr[] = "lmcfs.end";
// Bytes of the object given back by PunchHole (zeroed ranges, which the
// OSD's object store deallocates), in decimal; absent for none. Only the
// store's lock holder punches, one round at a time, so a plain
// read-modify-write under a compare of the old value suffices.
constexpr char kHolesAttr[] = "lmcfs.holes";
constexpr char kLockName[] = "lmcfs";
// Largest single write op: below the OSD's osd_max_write_size (90 MB).
constexpr size_t kMaxWriteOp = size_t{64} << 20;
// Most ranges zeroed in one operation.
constexpr size_t kMaxZeroOps = 64;

std::string RandomCookie() {
  std::random_device rd;
  std::mt19937_64 g((uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(getpid()));
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(g()));
  return b;
}

std::string Hostname() {
  char h[256] = {};
  if (gethostname(h, sizeof h - 1) != 0) return "?";
  return h;
}

class RadosEnvImpl;

class RadosFile final : public File {
 public:
  RadosFile(RadosEnvImpl* env, std::string oid, uint64_t size, bool writable)
      : env_(env), oid_(std::move(oid)), size_(size), writable_(writable) {}
  Result<size_t> ReadAt(uint64_t off, size_t n, uint8_t* dst) const override;
  Status Append(const uint8_t* p, size_t n) override {
    const std::span<const uint8_t> one(p, n);
    return AppendV(std::span<const std::span<const uint8_t>>(&one, 1));
  }
  Status AppendV(std::span<const std::span<const uint8_t>> pieces) override;
  Status Sync() override;
  Status Truncate(uint64_t size) override;
  uint64_t Size() const override { return size_; }

 private:
  Status GuardedWrite(librados::bufferlist& bl);
  RadosEnvImpl* env_;
  std::string oid_;
  uint64_t size_;
  bool writable_;
};

// One librados client: its threads, its sessions with the monitors and
// every OSD. Shut down when the last store using it closes.
class RadosClientImpl final : public RadosClient {
 public:
  ~RadosClientImpl() override { cluster.shutdown(); }

  // Connects as the options' client id, with their ceph.conf and keyring.
  Status Connect(const RadosOptions& o) {
    const std::string id = o.client_id.empty() ? "admin" : o.client_id;
    if (int r = cluster.init2(("client." + id).c_str(), "ceph", 0); r < 0)
      return Status::FromErrno(-r, "initializing the Ceph client");
    const char* conf = o.conf.empty() ? nullptr : o.conf.c_str();
    if (int r = cluster.conf_read_file(conf); r < 0) {
      const char* env = std::getenv("CEPH_CONF");
      return Status::FromErrno(-r, std::string("reading the Ceph configuration ") +
                                       (conf  ? conf
                                        : env ? env
                                              : "(CEPH_CONF unset; /etc/ceph/ceph.conf)") +
                                       ": set CEPH_CONF or -o ceph_conf=PATH");
    }
    cluster.conf_parse_env("CEPH_ARGS");
    if (!o.keyring.empty()) cluster.conf_set("keyring", o.keyring.c_str());
    // Bounded: a cluster that does not answer gives an error, not a hang.
    cluster.conf_set("client_mount_timeout", "30");
    cluster.conf_set("rados_mon_op_timeout", "30");
    cluster.conf_set("rados_osd_op_timeout", "120");
    if (int r = cluster.connect(); r < 0)
      return Status::FromErrno(-r,
                               "connecting to the Ceph cluster as client." + id +
                                   " (is it running? is CEPH_CONF right? scripts/ceph-dev.sh start runs one "
                                   "on this host)");
    return Status::Ok();
  }

  librados::Rados cluster;
};

class RadosEnvImpl final : public RadosEnv {
 public:
  RadosEnvImpl(std::string prefix, RadosOptions o) : prefix_(std::move(prefix)), opts_(std::move(o)) {}
  ~RadosEnvImpl() override {
    // Notifies still in flight complete (or fail: a fenced client's fail at
    // once) before the IoCtx and the client go; one that completed after
    // the shutdown had begun would run into a client half torn down.
    std::vector<librados::AioCompletion*> pending;
    {
      std::lock_guard l(notify_mu_);
      pending.swap(notifies_);
    }
    // Bounded: a notify times out after 2 s on the OSD; one still pending
    // after 5 s is left allocated rather than freed under librados.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    for (librados::AioCompletion* c : pending) {
      while (!c->is_complete() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (c->is_complete()) c->release();
    }
    io_.close();
  }

  Status Connect(const RadosSpec& spec) {
    spec_ = spec;
    // A read-only store may use a connection it is given (a union's
    // followers share one); a writer always has its own, since fencing it
    // blocklists its client and must not cut the other stores' reads.
    if (opts_.client && opts_.read_only) {
      client_ = std::static_pointer_cast<RadosClientImpl>(opts_.client);
    } else {
      auto own = std::make_shared<RadosClientImpl>();
      LMC_RETURN_IF_ERROR(own->Connect(opts_));
      client_ = std::move(own);
    }
    opts_.client.reset();
    if (int r = client_->cluster.ioctx_create(spec.pool.c_str(), io_); r < 0) {
      if (r == -ENOENT)
        return Status::NotFound("Ceph pool '" + spec.pool +
                                "' does not exist: create it (ceph osd pool create " + spec.pool +
                                ") or name another in rados:POOL/NAME");
      return Status::FromErrno(-r, "opening Ceph pool " + spec.pool);
    }
    io_.set_namespace(spec.name);
    // On a full pool (its quota reached, or the cluster's full ratio),
    // librados holds every write until space frees, so a save would hang
    // until rados_osd_op_timeout and then fail as if the cluster were down,
    // and the lock's renewal, held too, would be lost. With FULL_TRY an
    // operation that would add bytes fails at once with EDQUOT or ENOSPC
    // (Error: "the Ceph pool is full"), and those that add none go through:
    // deletes, punched holes, truncates, the lock's renewal, so that
    // removing checkpoints frees the pool while the mount stays up.
    io_.set_pool_full_try();
    cookie_ = RandomCookie();
    return Status::Ok();
  }

  librados::IoCtx& io() { return io_; }
  const std::string& cookie() const { return cookie_; }
  // Flags of a write to `oid` on a full pool. The packs (the data) fail
  // with EDQUOT or ENOSPC (FULL_TRY, set on io_). The store's metadata
  // (the journal and its HEAD, LOCK, CONFIG: a few kilobytes a commit,
  // bounded by the journal's snapshots) goes through (FULL_FORCE), as
  // CephFS's metadata server does: a remove or a rename is a journal
  // record, and it is what frees the pool.
  static int WriteFlags(std::string_view oid) {
    constexpr std::string_view packs = fmt::kPackDir;
    const bool pack = oid.starts_with(packs) && oid.size() > packs.size() && oid[packs.size()] == '/';
    return pack ? 0 : librados::OPERATION_FULL_FORCE;
  }
  std::string Tag(uint64_t size) const { return std::to_string(size) + "/" + cookie_; }

  // The object name of a path of this store; "" for the store itself.
  Result<std::string> Oid(const std::string& path) const {
    if (path == prefix_) return std::string();
    if (path.size() > prefix_.size() && path.compare(0, prefix_.size(), prefix_) == 0 &&
        path[prefix_.size()] == '/')
      return path.substr(prefix_.size() + 1);
    return Status::InvalidArgument(path + " is not in RADOS store " + prefix_);
  }

  // The status of a failed RADOS call (r < 0) on `what`.
  Status Error(int r, const std::string& what) const {
    const int e = -r;
    if (e == ECANCELED)
      return Status::Busy(
          what + " in " + prefix_ +
          ": another client changed the object since this one last wrote it, so this mount no "
          "longer owns the store (another node took it over); unmount here and remount");
    if (e == ESHUTDOWN)  // what librados returns to a blocklisted client
      return Status::Busy(what + " in " + prefix_ +
                          ": this client was fenced (blocklisted) because another node took the store over; "
                          "unmount here and remount");
    if (e == ENOSPC || e == EDQUOT)
      return Status::NoSpace(what + " in " + prefix_ + ": the Ceph pool is full (" + std::strerror(e) +
                             "); free space in the pool or raise its quota");
    if (e == ETIMEDOUT)
      return Status::IOError(what + " in " + prefix_ +
                             ": the Ceph cluster did not answer in time (is it up? ceph -s)");
    if (e == ENOENT) return Status::NotFound(what + " in " + prefix_ + ": no such object");
    return Status::FromErrno(e, what + " in " + prefix_);
  }

  // A monitor command's answer (bounded by rados_mon_op_timeout).
  Status MonCommand(const nlohmann::json& cmd, std::string* out) {
    librados::bufferlist in, outbl;
    std::string outs;
    if (int r = client_->cluster.mon_command(cmd.dump(), in, &outbl, &outs); r < 0)
      return Status::FromErrno(-r, "asking the Ceph monitors '" + cmd.value("prefix", std::string()) +
                                       "' for pool " + spec_.pool + (outs.empty() ? "" : ": " + outs));
    *out = outbl.to_str();
    return Status::Ok();
  }

  // Calls fn(object name, the name after `dir`/) for each object under
  // `dir` (a scan of the store's namespace).
  Status ForEachUnder(const std::string& dir,
                      const std::function<void(const std::string&, const std::string&)>& fn) {
    LMC_ASSIGN_OR_RETURN(std::string rel, Oid(dir));
    const std::string prefix = rel.empty() ? "" : rel + "/";
    try {
      for (auto it = io_.nobjects_begin(); it != io_.nobjects_end(); ++it) {
        const std::string& oid = it->get_oid();
        if (oid.compare(0, prefix.size(), prefix) == 0) fn(oid, oid.substr(prefix.size()));
      }
    } catch (const std::exception& e) {
      return Status::IOError("listing " + dir + ": " + e.what());
    }
    return Status::Ok();
  }

  Status CheckLock(const std::string& what) const {
    if (opts_.read_only)
      return Status::Unsupported(what + " in " + prefix_ + ": the store is open read-only (a follower)");
    if (lock_lost_.load())
      return Status::Busy(what + " in " + prefix_ +
                          ": this mount lost the store's lock (its lease was not renewed in time, or another "
                          "node took the store over); unmount here and remount");
    return Status::Ok();
  }

  Result<std::unique_ptr<File>> OpenFile(const std::string& path, OpenMode mode) override {
    LMC_ASSIGN_OR_RETURN(std::string oid, Oid(path));
    if (mode == OpenMode::kCreate) {
      LMC_RETURN_IF_ERROR(CheckLock("creating " + oid));
      librados::ObjectWriteOperation op;
      op.create(true);
      librados::bufferlist tag;
      tag.append(Tag(0));
      op.setxattr(kEndAttr, tag);
      if (int r = io_.operate(oid, &op, WriteFlags(oid)); r < 0) {
        if (r == -EEXIST) return Status::FromErrno(EEXIST, "creating " + oid + " in " + prefix_);
        return Error(r, "creating " + oid);
      }
      return std::unique_ptr<File>(new RadosFile(this, oid, 0, true));
    }
    for (int attempt = 0;; ++attempt) {
      uint64_t size = 0;
      time_t mtime = 0;
      if (int r = io_.stat(oid, &size, &mtime); r < 0) return Error(r, "opening " + oid);
      if (mode == OpenMode::kRead) return std::unique_ptr<File>(new RadosFile(this, oid, size, false));
      // Claim the object: from now on only this client's appends land in
      // it (an append by its previous writer finds the end tag changed).
      LMC_RETURN_IF_ERROR(CheckLock("opening " + oid));
      librados::bufferlist old;
      const int gr = io_.getxattr(oid, kEndAttr, old);
      librados::ObjectWriteOperation op;
      if (gr >= 0) op.cmpxattr(kEndAttr, LIBRADOS_CMPXATTR_OP_EQ, old);
      op.assert_exists();
      librados::bufferlist tag;
      tag.append(Tag(size));
      op.setxattr(kEndAttr, tag);
      int r = io_.operate(oid, &op, WriteFlags(oid));
      if (r == -ECANCELED && attempt < 3) continue;  // it changed between stat and claim
      if (r < 0) return Error(r, "opening " + oid);
      // Sizes are checked again under the claim: a write between stat and
      // claim would have changed the tag.
      uint64_t now = 0;
      if (int r2 = io_.stat(oid, &now, &mtime); r2 < 0) return Error(r2, "opening " + oid);
      if (now != size) {
        if (attempt < 3) continue;
        return Status::Busy("opening " + oid + " in " + prefix_ + ": another client keeps writing it");
      }
      return std::unique_ptr<File>(new RadosFile(this, oid, size, true));
    }
  }

  Status CreateDir(const std::string&) override { return Status::Ok(); }
  // Creations and removals are durable when RADOS acknowledges them.
  Status SyncDir(const std::string&) override { return Status::Ok(); }

  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    std::set<std::string> names;
    LMC_RETURN_IF_ERROR(ForEachUnder(path, [&](const std::string&, const std::string& rest) {
      names.insert(rest.substr(0, rest.find('/')));
    }));
    return std::vector<std::string>(names.begin(), names.end());
  }

  bool FileExists(const std::string& path) override {
    auto oid = Oid(path);
    if (!oid.ok()) return false;
    if (oid->empty()) return true;
    uint64_t size = 0;
    time_t mtime = 0;
    return io_.stat(*oid, &size, &mtime) == 0;
  }

  Status DeleteFile(const std::string& path) override {
    LMC_ASSIGN_OR_RETURN(std::string oid, Oid(path));
    LMC_RETURN_IF_ERROR(CheckLock("deleting " + oid));
    {
      std::lock_guard l(holes_mu_);
      holes_.erase(oid);
    }
    if (int r = io_.remove(oid); r < 0) return Error(r, "deleting " + oid);
    return Status::Ok();
  }

  // RADOS has no rename: the target is replaced whole (write_full is
  // atomic: a reader sees the old or the new contents), then the source
  // is removed. Used only for small files (WriteFileAtomic).
  Status RenameFile(const std::string& from, const std::string& to) override {
    LMC_ASSIGN_OR_RETURN(std::string src, Oid(from));
    LMC_ASSIGN_OR_RETURN(std::string dst, Oid(to));
    LMC_RETURN_IF_ERROR(CheckLock("renaming " + src));
    uint64_t size = 0;
    time_t mtime = 0;
    if (int r = io_.stat(src, &size, &mtime); r < 0) return Error(r, "renaming " + src);
    librados::bufferlist bl;
    if (size > 0) {
      if (int r = io_.read(src, bl, size, 0); r < 0) return Error(r, "renaming " + src);
    }
    librados::ObjectWriteOperation op;
    op.write_full(bl);
    librados::bufferlist tag;
    tag.append(Tag(bl.length()));
    op.setxattr(kEndAttr, tag);
    if (int r = io_.operate(dst, &op, WriteFlags(dst)); r < 0)
      return Error(r, "renaming " + src + " to " + dst);
    if (int r = io_.remove(src); r < 0) return Error(r, "renaming " + src + " (removing it)");
    return Status::Ok();
  }

  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override;
  Result<std::unique_ptr<FileLock>> Watch(const std::string& path, std::function<void()> fn) override;
  // Tells the followers' watches, without waiting for their acks; the
  // completion is kept until it completes (reaped by the next Notify or
  // waited for by the destructor), so that none is in flight at shutdown.
  void Notify(const std::string& path) override {
    auto oid = Oid(path);
    if (!oid.ok()) return;
    librados::AioCompletion* c = librados::Rados::aio_create_completion();
    librados::bufferlist bl;
    if (io_.aio_notify(*oid, c, bl, 2000, nullptr) < 0) {
      spdlog::debug("notify of {} failed", *oid);
      c->release();
      return;
    }
    std::lock_guard l(notify_mu_);
    std::erase_if(notifies_, [](librados::AioCompletion* done) {
      if (!done->is_complete()) return false;
      done->release();
      return true;
    });
    notifies_.push_back(c);
  }

  Result<uint64_t> DiskBytes(const std::string& dir) override {
    uint64_t total = 0;
    LMC_RETURN_IF_ERROR(ForEachUnder(dir, [&](const std::string& oid, const std::string&) {
      if (auto n = ObjectDiskBytes(oid); n.ok()) total += *n;
    }));
    return total;
  }

  Result<uint64_t> FileDiskBytes(const std::string& path) override {
    LMC_ASSIGN_OR_RETURN(std::string oid, Oid(path));
    return ObjectDiskBytes(oid);
  }

  Status PunchHole(const std::string& path, uint64_t off, uint64_t len) override {
    const Range r{off, len};
    size_t done = 0;
    return PunchHoles(path, std::span<const Range>(&r, 1), &done);
  }

  // Zeroes the ranges (CEPH_OSD_OP_ZERO, which BlueStore deallocates) and
  // adds their lengths to the object's holes attribute, up to kMaxZeroOps
  // ranges an operation, which also asserts the object exists (a write
  // would create it again after compaction deleted it). The count each
  // object was last given is kept, so that a punch is one round trip.
  Status PunchHoles(const std::string& path, std::span<const Range> ranges, size_t* done) override {
    *done = 0;
    LMC_ASSIGN_OR_RETURN(std::string oid, Oid(path));
    const std::string what = "giving back dead bytes of " + oid;
    LMC_RETURN_IF_ERROR(CheckLock(what));
    for (int attempt = 0; *done < ranges.size();) {
      std::optional<uint64_t> holes;
      {
        std::lock_guard l(holes_mu_);
        if (auto it = holes_.find(oid); it != holes_.end()) holes = it->second;
      }
      bool present = true;
      if (!holes) {
        librados::bufferlist old;
        const int gr = io_.getxattr(oid, kHolesAttr, old);
        if (gr < 0 && gr != -ENODATA) return Error(gr, what);
        present = gr >= 0;
        holes = present ? ParseHoles(old) : 0;
      }
      const auto group = ranges.subspan(*done, std::min(ranges.size() - *done, kMaxZeroOps));
      uint64_t now = *holes;
      librados::ObjectWriteOperation op;
      op.assert_exists();
      librados::bufferlist expect, count;
      expect.append(std::to_string(*holes));
      if (present) op.cmpxattr(kHolesAttr, LIBRADOS_CMPXATTR_OP_EQ, expect);
      for (const Range& r : group) {
        if (r.len == 0) continue;
        op.zero(r.off, r.len);
        now += r.len;
      }
      count.append(std::to_string(now));
      op.setxattr(kHolesAttr, count);
      const int r = io_.operate(oid, &op);
      if (r == -ECANCELED && attempt++ < 3) {  // the count changed: read it again
        std::lock_guard l(holes_mu_);
        holes_.erase(oid);
        continue;
      }
      if (r < 0) {
        std::lock_guard l(holes_mu_);
        holes_.erase(oid);
      }
      if (r == -EOPNOTSUPP)
        return Status::Unsupported("pool " + spec_.pool +
                                   " cannot zero ranges of objects (an erasure-coded pool?)");
      if (r < 0) return Error(r, what);
      {
        std::lock_guard l(holes_mu_);
        holes_[oid] = now;
      }
      *done += group.size();
    }
    return Status::Ok();
  }

  Result<PoolSpace> Space() override {
    std::lock_guard l(space_mu_);
    const auto now = std::chrono::steady_clock::now();
    if (space_asked_ && now - *space_asked_ < std::chrono::seconds(5)) return space_;
    // A failed answer is kept 5 s too: each ask of monitors out of reach
    // takes rados_mon_op_timeout, and statfs callers queue on space_mu_.
    std::string df, quota;
    Status st = MonCommand({{"prefix", "df"}, {"format", "json"}}, &df);
    if (st.ok())
      st = MonCommand({{"prefix", "osd pool get-quota"}, {"pool", spec_.pool}, {"format", "json"}}, &quota);
    space_ = st.ok() ? PoolSpaceOf(df, quota, spec_.pool) : Result<PoolSpace>(st);
    space_asked_ = std::chrono::steady_clock::now();
    return space_;
  }

  std::string ClientAddress() const override { return client_->cluster.get_addrs(); }
  bool LockHeld() const override { return lock_held_.load() && !lock_lost_.load(); }

  librados::Rados& cluster() { return client_->cluster; }
  const RadosOptions& opts() const { return opts_; }
  const std::string& prefix() const { return prefix_; }
  std::atomic<bool> lock_lost_{false}, lock_held_{false};

 private:
  static uint64_t ParseHoles(const librados::bufferlist& bl) {
    const std::string s = bl.to_str();
    uint64_t v = 0;
    std::from_chars(s.data(), s.data() + s.size(), v);
    return v;
  }

  // An object's size less the bytes PunchHole gave back: its size and
  // attributes in one read.
  Result<uint64_t> ObjectDiskBytes(const std::string& oid) {
    librados::ObjectReadOperation op;
    uint64_t size = 0;
    time_t mtime = 0;
    int stat_r = 0, attrs_r = 0;
    std::map<std::string, librados::bufferlist> attrs;
    op.stat(&size, &mtime, &stat_r);
    op.getxattrs(&attrs, &attrs_r);
    if (int r = io_.operate(oid, &op, nullptr); r < 0) return Error(r, "reading the size of " + oid);
    auto it = attrs.find(kHolesAttr);
    const uint64_t holes = it == attrs.end() ? 0 : ParseHoles(it->second);
    return size - std::min(size, holes);
  }

  std::string prefix_;
  RadosOptions opts_;
  RadosSpec spec_;
  std::shared_ptr<RadosClientImpl> client_;  // released after io_ is closed
  librados::IoCtx io_;
  std::string cookie_;
  std::mutex notify_mu_;
  std::vector<librados::AioCompletion*> notifies_;  // notifies not known to be complete
  // The holes attribute PunchHoles last wrote, by object (holes_mu_).
  std::mutex holes_mu_;
  std::unordered_map<std::string, uint64_t> holes_;
  // Space's last answer and when it was asked (space_mu_).
  std::mutex space_mu_;
  std::optional<std::chrono::steady_clock::time_point> space_asked_;
  Result<PoolSpace> space_ = PoolSpace{};
};

Result<size_t> RadosFile::ReadAt(uint64_t off, size_t n, uint8_t* dst) const {
  size_t done = 0;
  while (done < n) {
    const size_t want = std::min(n - done, kMaxWriteOp);
    librados::bufferlist bl;
    const int r = env_->io().read(oid_, bl, want, off + done);
    if (r < 0) return env_->Error(r, "reading " + oid_);
    bl.begin().copy(static_cast<unsigned>(r), reinterpret_cast<char*>(dst + done));
    done += static_cast<size_t>(r);
    if (static_cast<size_t>(r) < want) break;
  }
  return done;
}

Status RadosFile::GuardedWrite(librados::bufferlist& bl) {
  librados::ObjectWriteOperation op;
  librados::bufferlist expect, tag;
  expect.append(env_->Tag(size_));
  tag.append(env_->Tag(size_ + bl.length()));
  op.cmpxattr(kEndAttr, LIBRADOS_CMPXATTR_OP_EQ, expect);
  op.write(size_, bl);
  op.setxattr(kEndAttr, tag);
  if (int r = env_->io().operate(oid_, &op, RadosEnvImpl::WriteFlags(oid_)); r < 0)
    return env_->Error(r, "appending to " + oid_);
  size_ += bl.length();
  return Status::Ok();
}

Status RadosFile::AppendV(std::span<const std::span<const uint8_t>> pieces) {
  if (!writable_) return Status::InvalidArgument(oid_ + " is open read-only");
  LMC_RETURN_IF_ERROR(env_->CheckLock("appending to " + oid_));
  librados::bufferlist bl;
  for (const auto& p : pieces) {
    size_t off = 0;
    while (off < p.size()) {
      const size_t n = std::min(p.size() - off, kMaxWriteOp - bl.length());
      bl.append(reinterpret_cast<const char*>(p.data() + off), static_cast<unsigned>(n));
      off += n;
      if (bl.length() == kMaxWriteOp) {
        LMC_RETURN_IF_ERROR(GuardedWrite(bl));
        bl.clear();
      }
    }
  }
  if (bl.length() > 0) LMC_RETURN_IF_ERROR(GuardedWrite(bl));
  return Status::Ok();
}

// A write is durable on every replica when RADOS acknowledges it.
Status RadosFile::Sync() { return env_->CheckLock("syncing " + oid_); }

Status RadosFile::Truncate(uint64_t size) {
  if (!writable_) return Status::InvalidArgument(oid_ + " is open read-only");
  LMC_RETURN_IF_ERROR(env_->CheckLock("truncating " + oid_));
  librados::ObjectWriteOperation op;
  librados::bufferlist expect, tag;
  expect.append(env_->Tag(size_));
  tag.append(env_->Tag(size));
  op.cmpxattr(kEndAttr, LIBRADOS_CMPXATTR_OP_EQ, expect);
  op.truncate(size);
  op.setxattr(kEndAttr, tag);
  if (int r = env_->io().operate(oid_, &op, RadosEnvImpl::WriteFlags(oid_)); r < 0)
    return env_->Error(r, "truncating " + oid_);
  size_ = size;
  return Status::Ok();
}

// The store's exclusive lock: a RADOS lock with a lease, renewed by a
// thread; the holder's description (host, pid, address) is the content of
// the lock object, for the message a refused opener prints.
class RadosLock final : public FileLock {
 public:
  RadosLock(RadosEnvImpl* env, std::string oid) : env_(env), oid_(std::move(oid)) {}
  ~RadosLock() override {
    {
      std::lock_guard l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (renew_.joinable()) renew_.join();
    if (!env_->lock_lost_.load()) env_->io().unlock(oid_, kLockName, env_->cookie());
    env_->lock_held_ = false;
  }

  Status Acquire() {
    const RadosOptions& o = env_->opts();
    // The holder's lease is in its description: a takeover waits out that
    // lease, not its own, and the refusal says how long it is.
    const std::string desc = Hostname() + " pid " + std::to_string(getpid()) + " " + env_->ClientAddress() +
                             " lease " + std::to_string(o.lease_seconds) + " s";
    std::list<librados::locker_t> previous;
    int r = Try(desc);
    if (r == -EBUSY || r == -EEXIST) {
      uint32_t lease = o.lease_seconds;  // a holder of before 2026-12-07 did not say
      std::string holder = Holder(&previous, &lease);
      const std::string secs = std::to_string(lease) + " s";
      if (o.takeover == Takeover::kNo)
        return Status::Busy("store " + env_->prefix() + " is held by " + holder +
                            ": it is mounted on another node. Unmount it there. If that node died, its lease "
                            "lapses within " +
                            secs +
                            " of its death: then open the store again, or mount "
                            "with -o takeover, which waits for that and fences the dead node");
      if (o.takeover == Takeover::kForce) {
        LMC_RETURN_IF_ERROR(Fence(previous));
        for (const auto& l : previous) env_->io().break_lock(oid_, kLockName, l.client, l.cookie);
        r = Try(desc);
      } else {
        spdlog::warn("store {}: held by {}; waiting up to {} s for its lease to lapse", env_->prefix(),
                     holder, lease + 2);
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(lease + 2);
        while ((r == -EBUSY || r == -EEXIST) && std::chrono::steady_clock::now() < until) {
          std::this_thread::sleep_for(std::chrono::milliseconds(250));
          r = Try(desc);
        }
        if (r == -EBUSY || r == -EEXIST)
          return Status::Busy("store " + env_->prefix() + " is held by " + holder +
                              ", which renewed its lease of " + secs + " for " + std::to_string(lease + 2) +
                              " s: it is alive. Unmount it there, or fence it with -o takeover=force");
        if (r == 0) {
          Status f = Fence(previous);
          if (!f.ok()) {
            env_->io().unlock(oid_, kLockName, env_->cookie());
            return f;
          }
        }
      }
    }
    if (r < 0) return env_->Error(r, "locking the store");
    env_->lock_held_ = true;
    env_->lock_lost_ = false;
    librados::bufferlist bl;
    bl.append(desc);
    librados::ObjectWriteOperation op;
    op.write_full(bl);
    env_->io().operate(oid_, &op, RadosEnvImpl::WriteFlags(oid_));
    renew_ = std::thread([this] { Renew(); });
    return Status::Ok();
  }

 private:
  int Try(const std::string& desc) {
    timeval dur{static_cast<time_t>(env_->opts().lease_seconds), 0};
    return env_->io().lock_exclusive(oid_, kLockName, env_->cookie(), desc, &dur, 0);
  }

  // The holders of the lock and the description the last one wrote (its
  // host, pid, address and lease); *lease is set to the lease it names.
  std::string Holder(std::list<librados::locker_t>* lockers, uint32_t* lease) {
    int exclusive = 0;
    std::string tag;
    env_->io().list_lockers(oid_, kLockName, &exclusive, &tag, lockers);
    librados::bufferlist bl;
    std::string desc;
    if (env_->io().read(oid_, bl, 4096, 0) > 0) desc = bl.to_str();
    if (const size_t at = desc.rfind(" lease "); at != std::string::npos) {
      unsigned n = 0;
      if (std::sscanf(desc.c_str() + at, " lease %u s", &n) == 1 && n > 0 && n <= 24 * 3600) *lease = n;
    }
    std::string who = desc.empty() ? "another client" : desc;
    for (const auto& l : *lockers) who += " [" + l.client + " at " + l.address + "]";
    return who;
  }

  // Puts the previous holders on the cluster's blocklist, so that nothing
  // they still send is applied, and waits for the new map.
  Status Fence(const std::list<librados::locker_t>& holders) {
    for (const auto& l : holders) {
      const int r = env_->cluster().blocklist_add(l.address, env_->opts().blocklist_seconds);
      if (r < 0) return env_->Error(r, "fencing the previous holder " + l.client + " at " + l.address);
      spdlog::warn("store {}: fenced the previous holder {} at {} (blocklisted for {} s)", env_->prefix(),
                   l.client, l.address, env_->opts().blocklist_seconds);
    }
    if (!holders.empty()) env_->cluster().wait_for_latest_osdmap();
    return Status::Ok();
  }

  void Renew() {
    const auto every =
        std::chrono::milliseconds(std::max<uint32_t>(1, env_->opts().lease_seconds) * 1000 / 3);
    std::unique_lock l(mu_);
    while (!cv_.wait_for(l, every, [&] { return stop_; })) {
      timeval dur{static_cast<time_t>(env_->opts().lease_seconds), 0};
      const int r =
          env_->io().lock_exclusive(oid_, kLockName, env_->cookie(), "", &dur, LIBRADOS_LOCK_FLAG_MUST_RENEW);
      if (r < 0) {
        env_->lock_lost_ = true;
        spdlog::error("store {}: lost the store's lock ({}): every later write fails; unmount and remount",
                      env_->prefix(), std::strerror(-r));
        return;
      }
    }
  }

  RadosEnvImpl* env_;
  std::string oid_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread renew_;
};

Result<std::unique_ptr<FileLock>> RadosEnvImpl::LockFile(const std::string& path) {
  LMC_ASSIGN_OR_RETURN(std::string oid, Oid(path));
  auto lock = std::make_unique<RadosLock>(this, oid);
  LMC_RETURN_IF_ERROR(lock->Acquire());
  return std::unique_ptr<FileLock>(std::move(lock));
}

// A watch on one object: each notify is acknowledged at once (the
// notifier never waits) and calls fn.
class RadosWatch final : public FileLock, public librados::WatchCtx2 {
 public:
  RadosWatch(RadosEnvImpl* env, std::string oid, std::function<void()> fn)
      : env_(env), oid_(std::move(oid)), fn_(std::move(fn)) {}
  ~RadosWatch() override {
    if (handle_) {
      env_->io().unwatch2(handle_);
      env_->cluster().watch_flush();
    }
  }
  Status Start() {
    if (int r = env_->io().watch2(oid_, &handle_, this); r < 0) {
      handle_ = 0;
      return env_->Error(r, "watching " + oid_);
    }
    return Status::Ok();
  }
  void handle_notify(uint64_t notify_id, uint64_t cookie, uint64_t, librados::bufferlist&) override {
    librados::bufferlist none;
    env_->io().notify_ack(oid_, notify_id, cookie, none);
    fn_();
  }
  // The watch broke (a lost connection): the follower's poll keeps it
  // current from then on (a watch is not re-established from librados's
  // own callback thread).
  void handle_error(uint64_t, int err) override {
    spdlog::warn("watch on {} in {} broke ({}); following by polling", oid_, env_->prefix(),
                 std::strerror(-err));
    fn_();
  }

 private:
  RadosEnvImpl* env_;
  std::string oid_;
  std::function<void()> fn_;
  uint64_t handle_ = 0;
};

Result<std::unique_ptr<FileLock>> RadosEnvImpl::Watch(const std::string& path, std::function<void()> fn) {
  LMC_ASSIGN_OR_RETURN(std::string oid, Oid(path));
  auto w = std::make_unique<RadosWatch>(this, oid, std::move(fn));
  LMC_RETURN_IF_ERROR(w->Start());
  return std::unique_ptr<FileLock>(std::move(w));
}

}  // namespace

Result<std::shared_ptr<RadosClient>> RadosClient::Connect(const RadosOptions& options) {
  auto c = std::make_shared<RadosClientImpl>();
  LMC_RETURN_IF_ERROR(c->Connect(options));
  return std::shared_ptr<RadosClient>(std::move(c));
}

Result<std::unique_ptr<RadosEnv>> RadosEnv::Open(const std::string& store, const RadosOptions& options) {
  LMC_ASSIGN_OR_RETURN(RadosSpec spec, ParseRadosSpec(store));
  auto env = std::make_unique<RadosEnvImpl>("rados:" + spec.pool + "/" + spec.name, options);
  LMC_RETURN_IF_ERROR(env->Connect(spec));
  return std::unique_ptr<RadosEnv>(std::move(env));
}

#endif  // LMC_HAVE_RADOS

}  // namespace lmc::store
