// Namespace operations, the inode table and inode lifecycle
// (docs/ARCHITECTURE.md, "The filesystem", "Lifecycle").
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <ctime>

#include "fs_impl.h"
#include "lmc/bytes.h"

// RENAME_NOREPLACE / RENAME_EXCHANGE: linux/fs.h values, kept here to
// avoid that header's clashes with sys/mount.h (glibc's stdio.h has them too).
#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

namespace lmc::fs {

namespace {

constexpr size_t kNameMax = 255;

// Locks several inodes in increasing ino order (the documented lock order);
// duplicates and nulls are skipped.
class MultiLock {
 public:
  explicit MultiLock(std::vector<Inode*> v) {
    v.erase(std::remove(v.begin(), v.end(), nullptr), v.end());
    std::sort(v.begin(), v.end(), [](Inode* a, Inode* b) { return a->ino < b->ino; });
    v.erase(std::unique(v.begin(), v.end()), v.end());
    for (Inode* i : v) locks_.emplace_back(i->mu);
  }

 private:
  std::vector<std::unique_lock<std::mutex>> locks_;
};

void FillStat(const Inode& in, struct stat* st) {
  *st = {};
  st->st_ino = in.ino;
  st->st_mode = in.rec.mode;
  st->st_nlink = in.rec.nlink;
  st->st_uid = in.rec.uid;
  st->st_gid = in.rec.gid;
  st->st_rdev = in.rec.rdev;
  st->st_size = static_cast<off_t>(in.IsDir() ? 4096 : in.rec.size);
  // st_blocks counts stored (compressed) bytes, so du shows what a file costs.
  st->st_blocks = static_cast<blkcnt_t>((in.rec.stored + 511) / 512);
  // Large buffers in cp, Python's open() and friends: few big writes.
  st->st_blksize = 1 << 20;
  st->st_atim = {in.rec.atime_ns / 1000000000, in.rec.atime_ns % 1000000000};
  st->st_mtim = {in.rec.mtime_ns / 1000000000, in.rec.mtime_ns % 1000000000};
  st->st_ctim = {in.rec.ctime_ns / 1000000000, in.rec.ctime_ns % 1000000000};
}

bool BadName(std::string_view name) {
  return name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos;
}

// Runs fn(inode) with the inode's mutex held; ENOENT/EIO if it cannot be loaded.
template <typename Fn>
int WithInode(Filesystem::Impl& m, uint64_t ino, Fn&& fn) {
  int err = 0;
  InodePtr in = m.Get(ino, &err);
  if (!in) return err;
  std::lock_guard lk(in->mu);
  return fn(*in);
}

// What a stat shows of a file that the filesystem may change on its own
// (FsOps::SetAttrListener).
struct AttrStamp {
  uint64_t size, stored;
  int64_t mtime_ns, ctime_ns;
  explicit AttrStamp(const Inode& in)
      : size(in.rec.size), stored(in.rec.stored), mtime_ns(in.rec.mtime_ns), ctime_ns(in.rec.ctime_ns) {}
  bool operator==(const AttrStamp&) const = default;
};

// WithInode, and the attribute listener told after the mutex is released
// if fn changed what a stat shows (never under it: the kernel, handling
// the notice, may wait for a read this daemon serves under that mutex).
template <typename Fn>
int WithInodeTelling(Filesystem::Impl& m, uint64_t ino, Fn&& fn) {
  int err = 0;
  InodePtr in = m.Get(ino, &err);
  if (!in) return err;
  bool changed;
  {
    std::lock_guard lk(in->mu);
    const AttrStamp before(*in);
    err = fn(*in);
    changed = !(AttrStamp(*in) == before);
  }
  if (changed) m.TellAttr(ino);
  return err;
}

}  // namespace

Filesystem::Impl::Impl(Filesystem* f) : fs(f), store(f->store_), data(f->store_, f->opts_, &f->counters_) {}

void Filesystem::FlushBackground() {
  if (impl_->data.delta) impl_->data.delta->Flush();
}

uint64_t Filesystem::BackgroundPending() const {
  return impl_->data.delta ? impl_->data.delta->Pending() : 0;
}

std::vector<std::pair<std::string, uint64_t>> Filesystem::DeltaCounters() const {
  return impl_->data.delta ? impl_->data.delta->Counters() : std::vector<std::pair<std::string, uint64_t>>{};
}

std::vector<std::pair<std::string, uint64_t>> Filesystem::NamedCounters() const {
  const FsCounters& c = counters_;
  return {{"write_calls", c.write_calls.load()},
          {"write_bytes", c.write_bytes.load()},
          {"read_calls", c.read_calls.load()},
          {"getattr_calls", c.getattr_calls.load()},
          {"flush_calls", c.flush_calls.load()},
          {"flushes_in_flight", c.flushes_in_flight.load()},
          {"removals", c.removals.load()},
          {"bytes_encoded", c.bytes_written.load()},
          {"chunks_written", c.chunks_written.load()},
          {"chunk_input_copies", c.chunk_input_copies.load()},
          {"dirty_carried_bytes", c.dirty_carried_bytes.load()},
          {"data_commits", c.commits.load()},
          {"cache_hits", c.cache_hits.load()},
          {"cache_misses", c.cache_misses.load()},
          {"eio", c.eio.load()},
          // The codec paths (docs/ARCHITECTURE.md, "GPU codec in the mount").
          {"cpu_encode_chunks", c.cpu_encode_chunks.load()},
          {"cpu_encode_bytes", c.cpu_encode_bytes.load()},
          {"gpu_encode_chunks", c.gpu_encode_chunks.load()},
          {"gpu_encode_bytes", c.gpu_encode_bytes.load()},
          {"matched_chunks", c.matched_chunks.load()},
          {"matched_bytes", c.matched_bytes.load()},
          {"cpu_decode_chunks", c.cpu_decode_chunks.load()},
          {"cpu_decode_bytes", c.cpu_decode_bytes.load()},
          {"gpu_decode_chunks", c.gpu_decode_chunks.load()},
          {"gpu_decode_bytes", c.gpu_decode_bytes.load()},
          {"gpu_batches", c.gpu_batches.load()},
          {"gpu_failed_batches", c.gpu_failed_batches.load()},
          {"gpu_fallback_chunks", c.gpu_fallback_chunks.load()},
          {"gpu_verify_failures", c.gpu_verify_failures.load()},
          {"write_budget_wait_ns", c.write_budget_wait_ns.load()},
          {"commit_wait_ns", c.commit_wait_ns.load()},
          {"gpu_feeder_idle_ns", c.gpu_feeder_idle_ns.load()},
          {"gpu_feeder_prepare_ns", c.gpu_feeder_prepare_ns.load()},
          {"gpu_feeder_finish_ns", c.gpu_feeder_finish_ns.load()},
          {"gpu_encode_call_ns", c.gpu_encode_call_ns.load()},
          {"gpu_decode_call_ns", c.gpu_decode_call_ns.load()},
          {"gpu_read_batch_ns", c.gpu_read_batch_ns.load()}};
}

std::vector<std::pair<std::string, uint64_t>> Filesystem::MemoryCounters() const {
  FileDataShared& d = impl_->data;
  const DeltaPolicy::CacheUse delta = d.delta ? d.delta->Cache() : DeltaPolicy::CacheUse{};
  return {{"write_inflight_bytes", d.inflight_bytes.load()},
          {"write_budget_bytes", opts_.write_budget},
          {"commit_queue_bytes", d.committing_bytes.load()},
          {"commit_queue_limit", opts_.commit_queue_limit},
          {"write_block_bytes", DirtyBlockBytes()},
          {"write_block_pool_bytes", DirtyBlockPoolBytes()},
          {"write_block_pool_capacity", DirtyBlockPoolCapacity()},
          {"chunk_cache_bytes", d.cache.bytes()},
          {"chunk_cache_capacity", d.cache.capacity()},
          {"delta_cache_bytes", delta.bytes},
          {"delta_cache_capacity", delta.capacity},
          {"inodes_cached", impl_->CachedInodes()}};
}

uint64_t Filesystem::ReleaseIdleWriteBlocks() { return TrimDirtyBlockPool(); }

std::string Filesystem::GpuState() const { return impl_->data.gpu.State(); }

void Filesystem::SetDeltaPolicy(std::unique_ptr<DeltaPolicy> policy) {
  impl_->data.delta = std::move(policy);
  if (impl_->data.delta && !opts_.read_only) {
    Impl* m = impl_.get();
    impl_->data.delta->SetRebaseListener(
        [m](uint64_t ino, uint64_t off, const store::ChunkKey& key) { m->RefreshFrameLen(ino, off, key); });
    impl_->data.delta->SetReencodedListener([m](const std::vector<store::ChunkKey>& keys) {
      m->RefreshCached(ChunkKeySet(keys.begin(), keys.end()));
    });
  }
  if (impl_->data.delta) {
    store::Store* st = store_;
    impl_->data.delta->SetPathResolver([st](const std::string& path) -> std::optional<uint64_t> {
      // Walk the committed directory entries from the root.
      uint64_t cur = kRootIno;
      size_t i = 0;
      while (i < path.size()) {
        size_t j = path.find('/', i);
        if (j == std::string::npos) j = path.size();
        if (j > i) {
          auto v = st->Get(store::Cf::kDirents, DirentKey(cur, path.substr(i, j - i)));
          if (!v.ok()) return std::nullopt;
          auto d = DecodeDirent(*v);
          if (!d || (d->mode & S_IFMT) != S_IFDIR) return std::nullopt;
          cur = d->ino;
        }
        i = j + 1;
      }
      return cur;
    });
  }
}

int Filesystem::Impl::ToErrno(const Status& s, std::string_view what, uint64_t ino) {
  return data.ToErrno(s, what, ino);
}

bool Filesystem::Impl::RefreshFrameLen(uint64_t ino, uint64_t off, const store::ChunkKey& key) {
  bool cached;
  {
    std::lock_guard lk(table_mu);
    cached = table.count(ino) != 0;
  }
  InodePtr in;
  bool changed = false;
  // A forget may take the inode out of the table between Get and its lock:
  // then the next Get loads it again, from the records that forget left.
  for (int tries = 0; tries < 2; tries++) {
    int err = 0;
    in = Get(ino, &err);
    if (!in) return false;  // deleted since
    std::lock_guard lk(in->mu);
    if (!InTable(in)) continue;
    auto info = store->GetChunkInfo(key);
    if (info.ok()) {  // else released since
      const uint64_t before = in->rec.stored;
      in->data.RefreshFrameLen(off, key, info->frame_len);
      changed = in->rec.stored != before;
    }
    break;
  }
  if (!cached) EvictIfUnused(in);
  if (changed) TellAttr(ino);
  return changed;
}

bool Filesystem::Impl::InTable(const InodePtr& in) {
  std::lock_guard tl(table_mu);
  auto it = table.find(in->ino);
  return it != table.end() && it->second == in;
}

void Filesystem::Impl::EvictIfUnused(const InodePtr& in) {
  // Only if ns_mu is free: Shutdown holds it while it waits for the rebase
  // thread, which calls this. Left in the table, the inode costs memory,
  // nothing else.
  std::unique_lock ns(ns_mu, std::try_to_lock);
  if (!ns.owns_lock()) return;
  std::lock_guard il(in->mu);
  if (in->nlookup || in->nopen || !in->Clean()) return;
  std::lock_guard tl(table_mu);
  // Held by the table and the caller only: another thread that got it
  // from the table (a second refresh of the same file) would go on with an
  // inode that the next Get no longer returns, and two inodes of one file
  // would write over each other's records. Under table_mu no new holder
  // can appear.
  if (auto it = table.find(in->ino); it != table.end() && it->second == in && in.use_count() == 2)
    table.erase(it);
}

Result<uint64_t> Filesystem::ChunksReencoded(const std::vector<store::ChunkKey>& keys) {
  if (keys.empty() || opts_.read_only) return uint64_t{0};
  const ChunkKeySet set(keys.begin(), keys.end());
  // The inodes in memory first (their extents not yet committed too), then
  // the store's extents: an inode evicted in between was clean, so its
  // extents are all in the store.
  uint64_t n = impl_->RefreshCached(set);
  LMC_ASSIGN_OR_RETURN(std::vector<ExtentPlace> places, FindExtentsUsing(store_, set));
  for (const ExtentPlace& p : places) n += impl_->RefreshFrameLen(p.ino, p.offset, p.key);
  return n;
}

uint64_t Filesystem::Impl::RefreshCached(const ChunkKeySet& keys) {
  std::vector<InodePtr> all;
  {
    std::lock_guard lk(table_mu);
    all.reserve(table.size());
    for (auto& [ino, in] : table) all.push_back(in);
  }
  uint64_t n = 0;
  for (const InodePtr& in : all) {
    uint64_t changed;
    {
      std::lock_guard lk(in->mu);
      // Forgotten since (its records are all in the store: the scan after
      // this finds them).
      if (!InTable(in)) continue;
      changed = in->data.RefreshKeys(keys);
    }
    if (changed) {
      n += changed;
      TellAttr(in->ino);
    }
  }
  return n;
}

void Filesystem::Impl::TellAttr(uint64_t ino, bool data) {
  std::shared_lock lk(attr_mu);
  if (attr_listener) attr_listener(ino, data);
}

bool Filesystem::SetAttrListener(AttrListener fn) {
  std::unique_lock lk(impl_->attr_mu);
  impl_->attr_listener = std::move(fn);
  return true;
}

void Filesystem::Impl::TellEntry(uint64_t parent, std::string_view name) {
  std::shared_lock lk(attr_mu);
  if (entry_listener) entry_listener(parent, name);
}

bool Filesystem::SetEntryListener(EntryListener fn) {
  std::unique_lock lk(impl_->attr_mu);
  impl_->entry_listener = std::move(fn);
  return true;
}

InodePtr Filesystem::Impl::Get(uint64_t ino, int* err) {
  std::lock_guard lk(table_mu);
  auto it = table.find(ino);
  if (it != table.end()) return it->second;
  auto v = store->Get(store::Cf::kInodes, InodeKey(ino));
  if (!v.ok()) {
    *err = v.status().IsNotFound() ? ENOENT : ToErrno(v.status(), "load inode", ino);
    return nullptr;
  }
  auto rec = DecodeInode(*v);
  if (!rec) {
    *err = ToErrno(Status::Corruption("undecodable inode record"), "load inode", ino);
    return nullptr;
  }
  auto in = std::make_shared<Inode>(ino, data);
  in->rec = std::move(*rec);
  in->data.SetLoadedSize(in->rec.size);
  if (!in->IsReg()) in->data.SetEmpty();
  table.emplace(ino, in);
  return in;
}

void Filesystem::Refreshed::Add(store::Cf cf, std::string_view key, store::Store::KeyChange how) {
  if (key.size() < 8) return;
  const uint64_t ino = LoadBE64(key.data());
  switch (cf) {
    case store::Cf::kInodes:
      attrs.insert(ino);
      break;
    case store::Cf::kDirents:  // an entry made or removed: the directory's times and size too
      attrs.insert(ino);
      entries.emplace(ino, std::string(key.substr(8)));
      break;
    case store::Cf::kExtents:
      // The same bytes re-encoded elsewhere: the kernel keeps its pages.
      if (how == store::Store::KeyChange::kTrailerOnly)
        attrs.insert(ino);
      else
        data.insert(ino);
      break;
    case store::Cf::kMeta:  // xattrs, which the kernel does not cache; the filesystem's own keys
      break;
  }
}

void Filesystem::FollowerRefreshed(const Refreshed& changed) {
  Impl& m = *impl_;
  std::vector<InodePtr> all;
  {
    std::lock_guard lk(m.table_mu);
    all.reserve(m.table.size());
    for (auto& [ino, in] : m.table) all.push_back(in);
  }
  // Inode::mu before table_mu, as everywhere (a forget holds the inode's
  // mutex while it erases): the open count cannot change between the look
  // and the erase.
  auto forget_unopened = [&](const InodePtr& in) {
    std::lock_guard il(in->mu);
    if (in->nopen > 0) return false;
    std::lock_guard lk(m.table_mu);
    if (auto it = m.table.find(in->ino); it != m.table.end() && it->second == in) m.table.erase(it);
    return true;
  };
  // Closed since they changed: what the kernel cached while they were open
  // is of the version they opened.
  std::vector<std::pair<uint64_t, bool>> tell;
  for (auto it = m.changed_while_open.begin(); it != m.changed_while_open.end();) {
    InodePtr in;
    {
      std::lock_guard lk(m.table_mu);
      if (auto t = m.table.find(it->first); t != m.table.end()) in = t->second;
    }
    if (in && !forget_unopened(in)) {
      ++it;
      continue;
    }
    tell.emplace_back(it->first, it->second);
    it = m.changed_while_open.erase(it);
  }
  if (!changed.empty()) {
    for (const InodePtr& in : all) {
      if (forget_unopened(in)) continue;
      const bool data = changed.data.count(in->ino) > 0;
      if (data || changed.attrs.count(in->ino)) m.changed_while_open[in->ino] |= data;
    }
    for (uint64_t ino : changed.attrs)
      if (!changed.data.count(ino)) tell.emplace_back(ino, false);
    for (uint64_t ino : changed.data) tell.emplace_back(ino, true);
  }
  for (const auto& [parent, name] : changed.entries) m.TellEntry(parent, name);
  for (const auto& [ino, data] : tell) m.TellAttr(ino, data);
}

void Filesystem::Impl::Erase(uint64_t ino) {
  {
    std::lock_guard lk(table_mu);
    table.erase(ino);
  }
  if (data.delta) data.delta->Forget(ino);
}

Filesystem::Filesystem(store::Store* store, std::string store_dir, const FsOptions& options)
    : store_(store), store_dir_(std::move(store_dir)), opts_(options) {
  impl_ = std::make_unique<Impl>(this);
  // The free dirty blocks kept for the next writes hold no more than the
  // writes in flight may.
  SetDirtyBlockPoolLimit(opts_.write_budget);
}

Filesystem::~Filesystem() {
  // The policy's background thread calls back into impl_ (RefreshFrameLen):
  // stop it before any of impl_ goes.
  if (impl_ && impl_->data.delta) impl_->data.delta->StopBackground();
}

Result<std::unique_ptr<Filesystem>> Filesystem::Open(store::Store* store, const std::string& store_dir,
                                                     const FsOptions& options) {
  if (options.chunk_size == 0 || options.chunk_size > kMaxChunkSize)
    return Status::InvalidArgument("chunk size out of range");
  std::unique_ptr<Filesystem> f(new Filesystem(store, store_dir, options));
  Impl& m = *f->impl_;
  auto next = store->Get(store::Cf::kMeta, kMetaNextIno);
  if (next.ok()) {
    if (next->size() != 8) return Status::Corruption("fs/next_ino is not 8 bytes");
    m.next_ino = LoadLE64(next->data());
  } else if (next.status().IsNotFound()) {
    if (options.read_only) return Status::InvalidArgument("read-only mount of an empty store");
    InodeRec root;
    root.mode = S_IFDIR | 0755;
    root.uid = getuid();
    root.gid = getgid();
    root.nlink = 2;
    root.atime_ns = root.mtime_ns = root.ctime_ns = NowNs();
    store::Batch b;
    b.Put(store::Cf::kInodes, InodeKey(kRootIno), EncodeInode(root));
    std::string n;
    AppendLE64(&n, 2);
    b.Put(store::Cf::kMeta, kMetaNextIno, n);
    b.Put(store::Cf::kMeta, kMetaFormat, "1");
    LMC_RETURN_IF_ERROR(store->Commit(b, true));
    m.next_ino = 2;
  } else {
    return next.status();
  }
  // Inodes unlinked while open when the last mount ended without releasing
  // them (crash): nothing can reach them any more.
  std::vector<uint64_t> orphans;
  LMC_RETURN_IF_ERROR(
      store->Scan(store::Cf::kMeta, kMetaOrphanPrefix, [&](std::string_view k, std::string_view) {
        if (k.size() == kMetaOrphanPrefix.size() + 8)
          orphans.push_back(LoadBE64(k.data() + kMetaOrphanPrefix.size()));
        return true;
      }));
  if (!options.read_only) {
    for (uint64_t ino : orphans) {
      int err = 0;
      InodePtr in = m.Get(ino, &err);
      store::Batch b;
      if (in) {
        std::lock_guard lk(in->mu);
        if (in->data.Purge(&b)) return Status::IOError("purging orphan inode failed");
      } else {
        b.Delete(store::Cf::kMeta, OrphanKey(ino));
      }
      LMC_RETURN_IF_ERROR(store->Commit(b, true));
      m.Erase(ino);
      spdlog::info("lmcfs: purged orphan inode {}", ino);
    }
  }
  return f;
}

// ---------------------------------------------------------------- lookups

int Filesystem::Lookup(uint64_t parent, std::string_view name, struct stat* out) {
  Impl& m = *impl_;
  if (name.size() > kNameMax) return ENAMETOOLONG;
  std::shared_lock ns(m.ns_mu);
  auto v = store_->Get(store::Cf::kDirents, DirentKey(parent, name));
  if (!v.ok()) return v.status().IsNotFound() ? ENOENT : m.ToErrno(v.status(), "lookup", parent);
  auto d = DecodeDirent(*v);
  if (!d) return m.ToErrno(Status::Corruption("undecodable dirent"), "lookup", parent);
  int err = 0;
  InodePtr in = m.Get(d->ino, &err);
  if (!in) return err == ENOENT ? EIO : err;  // a dirent naming no inode
  // The first lookup names the inode for the delta policy, with the
  // directory's own name (its lock taken and dropped before the inode's).
  bool unnamed;
  {
    std::lock_guard lk(in->mu);
    unnamed = in->name_hint.empty();
  }
  std::string dir_name;
  if (unnamed) {
    if (InodePtr dir = m.Get(parent, &err); dir && dir != in) {
      std::lock_guard dl(dir->mu);
      dir_name = dir->name_hint;
    }
  }
  std::lock_guard lk(in->mu);
  in->nlookup++;
  if (in->name_hint.empty()) {
    in->name_hint.assign(name);
    in->parent_hint = parent;
    in->dir_name_hint = std::move(dir_name);
  }
  FillStat(*in, out);
  return 0;
}

void Filesystem::Forget(uint64_t ino, uint64_t nlookup) {
  Impl& m = *impl_;
  if (ino == kRootIno) return;
  std::unique_lock ns(m.ns_mu);
  InodePtr in;
  {
    std::lock_guard lk(m.table_mu);
    auto it = m.table.find(ino);
    if (it == m.table.end()) return;
    in = it->second;
  }
  std::lock_guard lk(in->mu);
  in->nlookup -= std::min(in->nlookup, nlookup);
  if (in->nlookup || in->nopen) return;
  if (in->rec.nlink == 0 && !in->purged && !opts_.read_only) {
    store::Batch b;
    int err = in->data.Purge(&b);
    Status s = err ? Status::IOError("purge") : store_->Commit(b, false);
    if (!s.ok()) {
      spdlog::error("lmcfs: purging unlinked inode {} failed: {} (left for the next mount)", ino,
                    s.ToString());
      return;
    }
    in->MarkPurged();
  } else if (!in->Clean()) {
    if (in->data.Finalize(false)) return;  // keep it; a later forget retries
  }
  m.Erase(ino);
}

int Filesystem::GetAttr(uint64_t ino, struct stat* out) {
  counters_.getattr_calls++;
  return WithInode(*impl_, ino, [&](Inode& in) {
    FillStat(in, out);
    return 0;
  });
}

int Filesystem::SetAttr(uint64_t ino, const struct stat& a, int mask, struct stat* out) {
  Impl& m = *impl_;
  if (opts_.read_only) return EROFS;
  int err = 0;
  InodePtr in = m.Get(ino, &err);
  if (!in) return err;
  std::lock_guard lk(in->mu);
  int64_t now = NowNs();
  if (mask & kSetSize) {
    if (in->IsDir()) return EISDIR;
    if (!in->IsReg()) return EINVAL;
    if (int e = in->data.Truncate(static_cast<uint64_t>(a.st_size))) return e;
  }
  if (mask & kSetMode) in->rec.mode = (in->rec.mode & S_IFMT) | (a.st_mode & 07777);
  if (mask & kSetUid) in->rec.uid = a.st_uid;
  if (mask & kSetGid) in->rec.gid = a.st_gid;
  if (mask & kSetAtimeNow)
    in->rec.atime_ns = now;
  else if (mask & kSetAtime)
    in->rec.atime_ns = int64_t{a.st_atim.tv_sec} * 1000000000 + a.st_atim.tv_nsec;
  if (mask & kSetMtimeNow)
    in->rec.mtime_ns = now;
  else if (mask & kSetMtime)
    in->rec.mtime_ns = int64_t{a.st_mtim.tv_sec} * 1000000000 + a.st_mtim.tv_nsec;
  if (mask & kSetCtime)
    in->rec.ctime_ns = int64_t{a.st_ctim.tv_sec} * 1000000000 + a.st_ctim.tv_nsec;
  else
    in->rec.ctime_ns = now;
  in->rec_dirty = true;
  if (int e = in->data.Commit(false)) return e;
  FillStat(*in, out);
  return 0;
}

// ---------------------------------------------------------------- creation

namespace {
struct NewInode {
  InodePtr in;
  int err = 0;
};
}  // namespace

// Shared by Create/Mknod/Mkdir/Symlink: one batch with the inode, its
// dirent, the parent's times (and nlink for a directory) and next_ino.
static int MakeNode(Filesystem::Impl& m, bool read_only, uint64_t parent, std::string_view name, mode_t mode,
                    dev_t rdev, std::string_view target, const Caller& c, bool open, struct stat* out) {
  if (read_only) return EROFS;
  if (name.size() > kNameMax) return ENAMETOOLONG;
  if (BadName(name)) return EINVAL;
  std::unique_lock ns(m.ns_mu);
  int err = 0;
  InodePtr dir = m.Get(parent, &err);
  if (!dir) return err;
  std::lock_guard dl(dir->mu);
  if (!dir->IsDir()) return ENOTDIR;
  if (dir->rec.nlink == 0) return ENOENT;
  auto v = m.store->Get(store::Cf::kDirents, DirentKey(parent, name));
  if (v.ok()) return EEXIST;
  if (!v.status().IsNotFound()) return m.ToErrno(v.status(), "create", parent);

  uint64_t ino;
  {
    std::lock_guard lk(m.table_mu);
    ino = m.next_ino++;
  }
  auto in = std::make_shared<Inode>(ino, m.data);
  int64_t now = NowNs();
  InodeRec& r = in->rec;
  r.mode = mode;
  r.uid = c.uid;
  r.gid = c.gid;
  // setgid directories: new entries take the directory's group, and new
  // directories inherit the bit.
  if (dir->rec.mode & S_ISGID) {
    r.gid = dir->rec.gid;
    if (S_ISDIR(mode)) r.mode |= S_ISGID;
  }
  r.nlink = S_ISDIR(mode) ? 2 : 1;
  r.rdev = static_cast<uint32_t>(rdev);
  r.atime_ns = r.mtime_ns = r.ctime_ns = now;
  if (S_ISLNK(mode)) {
    r.symlink.assign(target);
    r.size = target.size();
  }
  in->data.SetEmpty();
  in->name_hint.assign(name);
  in->parent_hint = dir->ino;
  in->dir_name_hint = dir->name_hint;
  in->nlookup = 1;
  in->nopen = open ? 1 : 0;
  in->nwrite = open ? 1 : 0;

  InodeRec dir_rec = dir->rec;
  dir_rec.mtime_ns = dir_rec.ctime_ns = now;
  if (S_ISDIR(mode)) dir_rec.nlink++;
  store::Batch b;
  b.Put(store::Cf::kInodes, InodeKey(ino), EncodeInode(r));
  b.Put(store::Cf::kDirents, DirentKey(parent, name), EncodeDirent({ino, mode & S_IFMT}));
  b.Put(store::Cf::kInodes, InodeKey(parent), EncodeInode(dir_rec));
  std::string n;
  AppendLE64(&n, ino + 1);
  b.Put(store::Cf::kMeta, kMetaNextIno, n);
  Status s = m.store->Commit(b, false);
  if (!s.ok()) return m.ToErrno(s, "create", parent);
  dir->rec = dir_rec;
  {
    std::lock_guard lk(m.table_mu);
    m.table[ino] = in;
  }
  FillStat(*in, out);
  return 0;
}

int Filesystem::Create(uint64_t parent, std::string_view name, mode_t mode, const Caller& c,
                       struct stat* out) {
  return MakeNode(*impl_, opts_.read_only, parent, name, (mode & 07777) | S_IFREG, 0, {}, c, true, out);
}

int Filesystem::Mknod(uint64_t parent, std::string_view name, mode_t mode, dev_t rdev, const Caller& c,
                      struct stat* out) {
  if (S_ISDIR(mode) || S_ISLNK(mode)) return EINVAL;
  if ((mode & S_IFMT) == 0) mode |= S_IFREG;
  return MakeNode(*impl_, opts_.read_only, parent, name, mode, rdev, {}, c, false, out);
}

int Filesystem::Mkdir(uint64_t parent, std::string_view name, mode_t mode, const Caller& c,
                      struct stat* out) {
  return MakeNode(*impl_, opts_.read_only, parent, name, (mode & 07777) | S_IFDIR, 0, {}, c, false, out);
}

int Filesystem::Symlink(std::string_view target, uint64_t parent, std::string_view name, const Caller& c,
                        struct stat* out) {
  if (target.empty() || target.size() > 4095) return target.empty() ? ENOENT : ENAMETOOLONG;
  return MakeNode(*impl_, opts_.read_only, parent, name, S_IFLNK | 0777, 0, target, c, false, out);
}

int Filesystem::Readlink(uint64_t ino, std::string* target) {
  return WithInode(*impl_, ino, [&](Inode& in) {
    if (!S_ISLNK(in.rec.mode)) return EINVAL;
    *target = in.rec.symlink;
    return 0;
  });
}

int Filesystem::Link(uint64_t ino, uint64_t newparent, std::string_view newname, struct stat* out) {
  Impl& m = *impl_;
  if (opts_.read_only) return EROFS;
  if (newname.size() > kNameMax) return ENAMETOOLONG;
  if (BadName(newname)) return EINVAL;
  std::unique_lock ns(m.ns_mu);
  int err = 0;
  InodePtr in = m.Get(ino, &err);
  if (!in) return err;
  InodePtr dir = m.Get(newparent, &err);
  if (!dir) return err;
  MultiLock locks({in.get(), dir.get()});
  if (in->IsDir()) return EPERM;
  if (!dir->IsDir()) return ENOTDIR;
  if (in->rec.nlink == 0) return ENOENT;
  auto v = m.store->Get(store::Cf::kDirents, DirentKey(newparent, newname));
  if (v.ok()) return EEXIST;
  if (!v.status().IsNotFound()) return m.ToErrno(v.status(), "link", newparent);
  if (int e = in->data.Commit(false)) return e;
  int64_t now = NowNs();
  InodeRec r = in->rec, dr = dir->rec;
  r.nlink++;
  r.ctime_ns = now;
  dr.mtime_ns = dr.ctime_ns = now;
  store::Batch b;
  b.Put(store::Cf::kDirents, DirentKey(newparent, newname), EncodeDirent({ino, r.mode & S_IFMT}));
  b.Put(store::Cf::kInodes, InodeKey(ino), EncodeInode(in->data.Durable(r)));
  b.Put(store::Cf::kInodes, InodeKey(newparent), EncodeInode(dr));
  if (m.data.delta && in->IsReg()) m.data.delta->Named(ino, newname, newparent, dir->name_hint, &b);
  Status s = m.store->Commit(b, false);
  if (!s.ok()) return m.ToErrno(s, "link", ino);
  in->rec = r;
  dir->rec = dr;
  in->name_hint.assign(newname);
  in->parent_hint = newparent;
  in->dir_name_hint = dir->name_hint;
  in->nlookup++;
  FillStat(*in, out);
  return 0;
}

// ---------------------------------------------------------------- removal

namespace {

// Adds to b the loss of one link of `in` (its mutex held): the inode
// record, or, at nlink 0, its purge (no kernel reference, no open handle)
// or an orphan mark (deleted at last forget/release, or the next mount).
// Returns errno; *purged tells the caller to mark it after the commit.
int DropLink(Inode& in, InodeRec* r, store::Batch* b, bool* purged) {
  *purged = false;
  if (S_ISDIR(r->mode)) {
    r->nlink = 0;
  } else if (r->nlink > 0) {
    r->nlink--;
  }
  r->ctime_ns = NowNs();
  if (r->nlink > 0) {
    // Another name still reaches the data: committed first, so that the
    // record names only durable bytes.
    if (int e = in.data.Commit(false)) return e;
    b->Put(store::Cf::kInodes, InodeKey(in.ino), EncodeInode(in.data.Durable(*r)));
    return 0;
  }
  // The last link: the data not committed yet is not committed now (it
  // dies with the file, or lives in memory for the open handles until the
  // last release purges it), so that a file whose data hit a full disk can
  // be deleted. Its batches at the committer go first, so that none of
  // their records lands after this one.
  in.data.SettleQueued();
  if (in.nlookup == 0 && in.nopen == 0) {
    *purged = true;
    return in.data.Purge(b);
  }
  b->Put(store::Cf::kInodes, InodeKey(in.ino), EncodeInode(in.data.Durable(*r)));
  b->Put(store::Cf::kMeta, OrphanKey(in.ino), "");
  return 0;
}

void RemovePurged(Filesystem::Impl& m, Inode& in) {
  in.MarkPurged();
  m.Erase(in.ino);
}

Result<bool> DirEmpty(store::Store* s, uint64_t ino) {
  bool empty = true;
  LMC_RETURN_IF_ERROR(
      s->Scan(store::Cf::kDirents, DirentPrefix(ino), [&](std::string_view, std::string_view) {
        empty = false;
        return false;
      }));
  return empty;
}

}  // namespace

// Unlink (dir=false) and Rmdir (dir=true): one batch with the dirent's
// removal, the parent's times (and nlink), and the child's lost link.
static int RemoveEntry(Filesystem::Impl& m, uint64_t parent, std::string_view name, bool dir) {
  const char* op = dir ? "rmdir" : "unlink";
  if (name.size() > kNameMax) return ENAMETOOLONG;
  std::unique_lock ns(m.ns_mu);
  auto v = m.store->Get(store::Cf::kDirents, DirentKey(parent, name));
  if (!v.ok()) return v.status().IsNotFound() ? ENOENT : m.ToErrno(v.status(), op, parent);
  auto d = DecodeDirent(*v);
  if (!d) return m.ToErrno(Status::Corruption("undecodable dirent"), op, parent);
  int err = 0;
  InodePtr pdir = m.Get(parent, &err);
  if (!pdir) return err;
  InodePtr in = m.Get(d->ino, &err);
  if (!in) return err == ENOENT ? EIO : err;
  MultiLock locks({pdir.get(), in.get()});
  InodeRec r = in->rec, dr = pdir->rec;
  if (dir) {
    if (!in->IsDir()) return ENOTDIR;
    auto empty = DirEmpty(m.store, in->ino);
    if (!empty.ok()) return m.ToErrno(empty.status(), op, in->ino);
    if (!*empty) return ENOTEMPTY;
    if (dr.nlink > 2) dr.nlink--;
  } else if (in->IsDir()) {
    return EISDIR;
  }
  dr.mtime_ns = dr.ctime_ns = NowNs();
  store::Batch b;
  b.Delete(store::Cf::kDirents, DirentKey(parent, name));
  bool purged = false;
  if (int e = DropLink(*in, &r, &b, &purged)) return e;
  b.Put(store::Cf::kInodes, InodeKey(parent), EncodeInode(dr));
  Status s = m.store->Commit(b, false);
  if (!s.ok()) return m.ToErrno(s, op, d->ino);
  in->rec = r;
  pdir->rec = dr;
  if (purged) RemovePurged(m, *in);
  return 0;
}

int Filesystem::Unlink(uint64_t parent, std::string_view name) {
  if (opts_.read_only) return EROFS;
  return RemoveEntry(*impl_, parent, name, false);
}

int Filesystem::Rmdir(uint64_t parent, std::string_view name) {
  if (opts_.read_only) return EROFS;
  if (name == ".") return EINVAL;
  if (name == "..") return ENOTEMPTY;
  return RemoveEntry(*impl_, parent, name, true);
}

int Filesystem::Rename(uint64_t parent, std::string_view name, uint64_t newparent, std::string_view newname,
                       unsigned flags) {
  Impl& m = *impl_;
  if (opts_.read_only) return EROFS;
  if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) return EINVAL;
  if ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE)) return EINVAL;
  if (newname.size() > kNameMax) return ENAMETOOLONG;
  if (BadName(newname) || BadName(name)) return EINVAL;
  std::unique_lock ns(m.ns_mu);
  auto sv = store_->Get(store::Cf::kDirents, DirentKey(parent, name));
  if (!sv.ok()) return sv.status().IsNotFound() ? ENOENT : m.ToErrno(sv.status(), "rename", parent);
  auto src = DecodeDirent(*sv);
  if (!src) return m.ToErrno(Status::Corruption("undecodable dirent"), "rename", parent);
  std::optional<DirentVal> dst;
  auto dv = store_->Get(store::Cf::kDirents, DirentKey(newparent, newname));
  if (dv.ok()) {
    dst = DecodeDirent(*dv);
    if (!dst) return m.ToErrno(Status::Corruption("undecodable dirent"), "rename", newparent);
  } else if (!dv.status().IsNotFound()) {
    return m.ToErrno(dv.status(), "rename", newparent);
  }
  if ((flags & RENAME_NOREPLACE) && dst) return EEXIST;
  if ((flags & RENAME_EXCHANGE) && !dst) return ENOENT;
  if (dst && dst->ino == src->ino) return 0;  // two links to one inode: nothing to do

  int err = 0;
  InodePtr pdir = m.Get(parent, &err);
  if (!pdir) return err;
  InodePtr ndir = m.Get(newparent, &err);
  if (!ndir) return err;
  InodePtr sin = m.Get(src->ino, &err);
  if (!sin) return err == ENOENT ? EIO : err;
  InodePtr din;
  if (dst) {
    din = m.Get(dst->ino, &err);
    if (!din) return err == ENOENT ? EIO : err;
  }
  MultiLock locks({pdir.get(), ndir.get(), sin.get(), din.get()});
  if (!ndir->IsDir()) return ENOTDIR;
  const bool sdir = sin->IsDir();
  const bool cross = parent != newparent;
  int64_t now = NowNs();
  // Work on copies; publish only after the commit.
  InodeRec pr = pdir->rec, nr = ndir->rec, sr = sin->rec, dr = din ? din->rec : InodeRec{};
  InodeRec* npr = cross ? &nr : &pr;  // new parent's record (same object if same dir)
  store::Batch b;
  bool purged = false;
  if (flags & RENAME_EXCHANGE) {
    const bool ddir = din->IsDir();
    b.Put(store::Cf::kDirents, DirentKey(parent, name), EncodeDirent({dst->ino, dr.mode & S_IFMT}));
    b.Put(store::Cf::kDirents, DirentKey(newparent, newname), EncodeDirent({src->ino, sr.mode & S_IFMT}));
    if (cross && sdir != ddir) {
      if (sdir) {
        pr.nlink--;
        nr.nlink++;
      } else {
        pr.nlink++;
        nr.nlink--;
      }
    }
    dr.ctime_ns = now;
    if (int e = din->data.Commit(false)) return e;
    b.Put(store::Cf::kInodes, InodeKey(dst->ino), EncodeInode(dr));
  } else {
    if (dst) {
      const bool ddir = din->IsDir();
      if (sdir && !ddir) return ENOTDIR;
      if (!sdir && ddir) return EISDIR;
      if (ddir) {
        auto empty = DirEmpty(store_, din->ino);
        if (!empty.ok()) return m.ToErrno(empty.status(), "rename", din->ino);
        if (!*empty) return ENOTEMPTY;
        if (npr->nlink > 2) npr->nlink--;
      }
      if (int e = DropLink(*din, &dr, &b, &purged)) return e;
    }
    b.Delete(store::Cf::kDirents, DirentKey(parent, name));
    b.Put(store::Cf::kDirents, DirentKey(newparent, newname), EncodeDirent({src->ino, sr.mode & S_IFMT}));
    if (sdir && cross) {
      if (pr.nlink > 2) pr.nlink--;
      nr.nlink++;
    }
  }
  pr.mtime_ns = pr.ctime_ns = now;
  nr.mtime_ns = nr.ctime_ns = now;
  sr.ctime_ns = now;
  // Replacing a file by renaming a new one over it (safetensors' save_file,
  // many frameworks' atomic saves) must not make the name point to a size
  // whose bytes are not committed yet: the source's buffered data is
  // encoded and committed first, as ext4's auto_da_alloc does. Otherwise a
  // crash before the writer's close leaves the new name at full size (the
  // writer's ftruncate) over a hole (found by scripts/crash_run.py).
  if (int e = sin->IsReg() ? sin->data.Finalize(false) : sin->data.Commit(false)) return e;
  // That applied the source's last chunks, so its stored bytes (st_blocks)
  // changed since the copy above: the record this rename writes, which no
  // later commit may write again, must count them.
  sr.stored = sin->rec.stored;
  // The delta policy keys lineage by name: a file written under a
  // temporary name (the atomic save above) gets its lineage now.
  if (m.data.delta) {
    if (sin->IsReg()) m.data.delta->Named(src->ino, newname, newparent, ndir->name_hint, &b);
    if (din && (flags & RENAME_EXCHANGE) && din->IsReg())
      m.data.delta->Named(dst->ino, name, parent, pdir->name_hint, &b);
  }
  b.Put(store::Cf::kInodes, InodeKey(src->ino), EncodeInode(sin->data.Durable(sr)));
  b.Put(store::Cf::kInodes, InodeKey(parent), EncodeInode(pr));
  if (cross) b.Put(store::Cf::kInodes, InodeKey(newparent), EncodeInode(nr));
  Status s = store_->Commit(b, false);
  if (!s.ok()) return m.ToErrno(s, "rename", src->ino);
  pdir->rec = pr;
  if (cross) ndir->rec = nr;
  // sin may be pdir/ndir only for a directory renamed into itself, which
  // the kernel refuses before asking us.
  sin->rec.ctime_ns = sr.ctime_ns;
  sin->name_hint.assign(newname);
  sin->parent_hint = newparent;
  sin->dir_name_hint = ndir->name_hint;
  if (din && (flags & RENAME_EXCHANGE)) {
    din->name_hint.assign(name);
    din->parent_hint = parent;
    din->dir_name_hint = pdir->name_hint;
  }
  if (din) {
    din->rec = dr;
    if (purged) RemovePurged(m, *din);
  }
  return 0;
}

int Filesystem::ReadDir(uint64_t ino, std::vector<DirEntry>* out) {
  Impl& m = *impl_;
  std::shared_lock ns(m.ns_mu);
  int err = 0;
  InodePtr dir = m.Get(ino, &err);
  if (!dir) return err;
  {
    std::lock_guard lk(dir->mu);
    if (!dir->IsDir()) return ENOTDIR;
  }
  out->clear();
  out->push_back({".", ino, S_IFDIR});
  out->push_back({"..", ino, S_IFDIR});  // the kernel fills in the real parent for ".."
  const size_t prefix = 8;
  Status s =
      store_->Scan(store::Cf::kDirents, DirentPrefix(ino), [&](std::string_view k, std::string_view v) {
        auto d = DecodeDirent(v);
        if (d) out->push_back({std::string(k.substr(prefix)), d->ino, d->mode});
        return true;
      });
  if (!s.ok()) return m.ToErrno(s, "readdir", ino);
  return 0;
}

// ---------------------------------------------------------------- files

int Filesystem::Open(uint64_t ino, int flags) {
  Impl& m = *impl_;
  int err = 0;
  InodePtr in = m.Get(ino, &err);
  if (!in) return err;
  std::lock_guard lk(in->mu);
  if (in->IsDir() && (flags & O_ACCMODE) != O_RDONLY) return EISDIR;
  if (opts_.read_only && ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC))) return EROFS;
  if ((flags & O_TRUNC) && in->IsReg() && (flags & O_ACCMODE) != O_RDONLY && in->rec.size > 0) {
    if (int e = in->data.Truncate(0)) return e;
    if (int e = in->data.Commit(false)) return e;
  }
  in->nopen++;
  if ((flags & O_ACCMODE) != O_RDONLY) in->nwrite++;
  return 0;
}

namespace {
// A flush, fsync or release while it runs (FsCounters::flush_calls,
// flushes_in_flight).
class FlushScope {
 public:
  explicit FlushScope(FsCounters& c) : c_(c) {
    c_.flush_calls++;
    c_.flushes_in_flight++;
  }
  ~FlushScope() { c_.flushes_in_flight--; }
  FlushScope(const FlushScope&) = delete;
  FlushScope& operator=(const FlushScope&) = delete;

 private:
  FsCounters& c_;
};
}  // namespace

int Filesystem::Release(uint64_t ino, bool writer) {
  FlushScope scope(counters_);
  Impl& m = *impl_;
  return WithInodeTelling(m, ino, [&](Inode& in) {
    if (in.nopen > 0) in.nopen--;
    if (writer && in.nwrite > 0) in.nwrite--;
    if (in.nopen > 0 || in.purged) return 0;
    if (in.rec.nlink == 0 && in.nlookup == 0) {
      // On a follower this is another node's orphan (a file it removed
      // while its kernel held it): purging it is that node's work, in its
      // store, as in Forget.
      if (!opts_.read_only) {
        store::Batch b;
        if (int e = in.data.Purge(&b)) return e;
        Status s = store_->Commit(b, false);
        if (!s.ok()) return m.ToErrno(s, "purge", ino);
        in.MarkPurged();
      }
      m.Erase(ino);
      return 0;
    }
    // Unlinked but still looked up: purged at the last forget (what it did
    // not commit is dropped then).
    if (in.rec.nlink == 0) return 0;
    // flush normally did this already; release's error is discarded by the
    // kernel, so this is only a safety net.
    return in.data.Finalize(false);
  });
}

int Filesystem::Read(uint64_t ino, uint64_t off, size_t size, std::string* out) {
  counters_.read_calls++;
  return WithInode(*impl_, ino, [&](Inode& in) {
    if (in.IsDir()) return EISDIR;
    return in.data.Read(off, size, out);
  });
}

int Filesystem::Seek(uint64_t ino, uint64_t off, int whence, uint64_t* out) {
  if (whence != SEEK_DATA && whence != SEEK_HOLE) return EINVAL;
  return WithInode(*impl_, ino, [&](Inode& in) {
    if (in.IsDir()) return EISDIR;
    if (!in.IsReg()) return EINVAL;
    return in.data.Seek(off, whence == SEEK_DATA, in.nwrite == 0, out);
  });
}

int Filesystem::ReadPieces(uint64_t ino, uint64_t off, size_t size, std::vector<ReadPiece>* pieces) {
  counters_.read_calls++;
  return WithInode(*impl_, ino, [&](Inode& in) {
    if (in.IsDir()) return EISDIR;
    return in.data.ReadPieces(off, size, pieces);
  });
}

int Filesystem::Write(uint64_t ino, uint64_t off, const void* data, size_t size) {
  if (opts_.read_only) return EROFS;
  return WithInode(*impl_, ino, [&](Inode& in) {
    if (!in.IsReg()) return EINVAL;
    if (in.purged) return EIO;
    counters_.write_calls++;
    counters_.write_bytes += size;
    return in.data.Write(off, static_cast<const uint8_t*>(data), size);
  });
}

int Filesystem::Fallocate(uint64_t ino, int mode, uint64_t off, uint64_t len) {
  if (opts_.read_only) return EROFS;
  if (mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) return EOPNOTSUPP;
  const bool punch = mode & FALLOC_FL_PUNCH_HOLE, zero = mode & FALLOC_FL_ZERO_RANGE;
  const bool keep = mode & FALLOC_FL_KEEP_SIZE;
  if (punch && (zero || !keep)) return EOPNOTSUPP;  // as fallocate(2) says
  if (len == 0) return EINVAL;
  if (off + len < off || off + len > (uint64_t{1} << 62)) return EFBIG;
  return WithInode(*impl_, ino, [&](Inode& in) {
    if (in.IsDir()) return EISDIR;
    if (!in.IsReg()) return ENODEV;
    if (in.purged) return EIO;
    if (punch || zero)
      if (int e = in.data.PunchHole(off, off + len)) return e;
    if (!keep && off + len > in.rec.size) return in.data.Truncate(off + len);
    return 0;
  });
}

// A regular file unlinked while open has no name to make durable: its
// bytes stay in memory for its open handles (the pipeline still commits
// full batches) until the purge drops them, so that closing it on a full
// disk succeeds.
static bool Unnamed(const Inode& in) { return in.IsReg() && in.rec.nlink == 0; }

int Filesystem::Flush(uint64_t ino) {
  if (opts_.read_only) return 0;
  FlushScope scope(counters_);
  return WithInodeTelling(*impl_, ino, [&](Inode& in) { return Unnamed(in) ? 0 : in.data.Finalize(false); });
}

int Filesystem::Fsync(uint64_t ino, bool /*datasync*/) {
  if (opts_.read_only) return 0;
  FlushScope scope(counters_);
  return WithInodeTelling(*impl_, ino, [&](Inode& in) { return Unnamed(in) ? 0 : in.data.Finalize(true); });
}

int Filesystem::FsyncDir(uint64_t ino) {
  if (opts_.read_only) return 0;
  FlushScope scope(counters_);
  return WithInode(*impl_, ino, [&](Inode& in) {
    // Namespace changes are already committed (WAL not synced): a synced
    // commit makes all of them durable.
    return in.data.Commit(true);
  });
}

int Filesystem::CopyRange(uint64_t src, uint64_t soff, uint64_t dst, uint64_t doff, uint64_t len,
                          uint64_t* copied) {
  Impl& m = *impl_;
  *copied = 0;
  if (opts_.read_only) return EROFS;
  int err = 0;
  InodePtr si = m.Get(src, &err);
  if (!si) return err;
  InodePtr di = m.Get(dst, &err);
  if (!di) return err;
  if (src == dst) {
    // Overlapping ranges of one file: copy the bytes.
    std::string buf;
    if (int e = Read(src, soff, static_cast<size_t>(std::min<uint64_t>(len, 64u << 20)), &buf)) return e;
    if (int e = Write(dst, doff, buf.data(), buf.size())) return e;
    *copied = buf.size();
    return 0;
  }
  bool src_changed = false;
  const int e = [&] {
    MultiLock locks({si.get(), di.get()});
    if (!si->IsReg() || !di->IsReg()) return EINVAL;
    if (di->purged) return EIO;
    if (soff >= si->rec.size || len == 0) return 0;
    len = std::min(len, si->rec.size - soff);
    if (doff + len < doff || doff + len > (uint64_t{1} << 62)) return EFBIG;
    // src's bytes must all be in committed extents to be shared (which
    // may change its stored size: the kernel is told, as after a flush).
    const AttrStamp before(*si);
    int err = si->data.Finalize(false);
    src_changed = !(AttrStamp(*si) == before);
    if (err) return err;
    if ((err = di->data.CloneFrom(si->data, soff, doff, len))) return err;
    *copied = len;
    return 0;
  }();
  if (src_changed) m.TellAttr(src);
  return e;
}

int Filesystem::StatFs(struct statvfs* out) {
  if (int e = store_->BackingSpace(out)) return e;
  // The backing filesystem's size and free space, with used = what the
  // store directory occupies (df's used is f_blocks - f_bfree), so df on
  // the mount shows what lmcfs costs on the disk.
  if (auto u = store_->KnownDiskUsage(); u.ok() && out->f_frsize > 0) {
    const uint64_t used = (u->total + out->f_frsize - 1) / out->f_frsize;
    out->f_bfree = out->f_blocks > used ? out->f_blocks - used : 0;
    out->f_bavail = std::min<uint64_t>(out->f_bavail, out->f_bfree);
  }
  // Inodes: the records in the index (every file, directory and link the
  // namespace holds, and those unlinked but still open), counted from the
  // index at most once a second; a capacity of 2^32, so that df -i shows
  // what is used and the rest as free (inode numbers are 64-bit and never
  // run out).
  uint64_t used = 0;
  {
    std::lock_guard lk(impl_->statfs_mu);
    const int64_t now = NowNs();
    if (impl_->inodes_counted_ns == 0 || now - impl_->inodes_counted_ns > 1000 * 1000 * 1000) {
      uint64_t n = 0;
      Status s = store_->Scan(store::Cf::kInodes, "", [&](std::string_view, std::string_view) {
        n++;
        return true;
      });
      if (!s.ok()) return impl_->ToErrno(s, "statfs (counting inodes)", kRootIno);
      impl_->inodes_counted = n;
      impl_->inodes_counted_ns = now;
    }
    used = impl_->inodes_counted;
  }
  constexpr uint64_t kInodeCapacity = uint64_t{1} << 32;
  out->f_files = std::max(kInodeCapacity, used);
  out->f_ffree = out->f_files - used;
  out->f_favail = out->f_ffree;
  out->f_namemax = kNameMax;
  return 0;
}

Status Filesystem::Shutdown() {
  Impl& m = *impl_;
  std::unique_lock ns(m.ns_mu);
  std::vector<InodePtr> all;
  {
    std::lock_guard lk(m.table_mu);
    for (auto& [ino, in] : m.table) all.push_back(in);
  }
  spdlog::info(
      "lmcfs: {} writes ({} bytes), {} chunks ({} bytes) encoded, {} data commits, "
      "cache {} hits / {} misses, {} EIO",
      counters_.write_calls.load(), counters_.write_bytes.load(), counters_.chunks_written.load(),
      counters_.bytes_written.load(), counters_.commits.load(), counters_.cache_hits.load(),
      counters_.cache_misses.load(), counters_.eio.load());
  if (opts_.gpu)
    spdlog::info(
        "lmcfs: codec paths: GPU encoded {} chunks ({} bytes) and decoded {} ({} bytes), CPU encoded {} and "
        "decoded {}; {} GPU batches, {} failed; {} GPU frames did not decode back (encoded on the CPU); "
        "GPU: {}",
        counters_.gpu_encode_chunks.load(), counters_.gpu_encode_bytes.load(),
        counters_.gpu_decode_chunks.load(), counters_.gpu_decode_bytes.load(),
        counters_.cpu_encode_chunks.load(), counters_.cpu_decode_chunks.load(), counters_.gpu_batches.load(),
        counters_.gpu_failed_batches.load(), counters_.gpu_verify_failures.load(), GpuState());
  auto sec = [](const std::atomic<uint64_t>& ns) { return static_cast<double>(ns.load()) / 1e9; };
  std::string gpu_times;
  if (opts_.gpu)
    gpu_times = fmt::format(
        "; GPU feeder idle {:.2f} s, preparing {:.2f} s, in device encode calls {:.2f} s, "
        "finishing {:.2f} s; device decode calls {:.2f} s, read-ahead batches {:.2f} s",
        sec(counters_.gpu_feeder_idle_ns), sec(counters_.gpu_feeder_prepare_ns),
        sec(counters_.gpu_encode_call_ns), sec(counters_.gpu_feeder_finish_ns),
        sec(counters_.gpu_decode_call_ns), sec(counters_.gpu_read_batch_ns));
  spdlog::info(
      "lmcfs: time in the write and codec pipelines: writers waited {:.2f} s for the write budget "
      "and {:.2f} s for commits{}",
      sec(counters_.write_budget_wait_ns), sec(counters_.commit_wait_ns), gpu_times);
  Status first;
  for (auto& in : all) {
    std::lock_guard lk(in->mu);
    if (opts_.read_only || in->purged) continue;
    int e = 0;
    if (in->rec.nlink == 0) {
      store::Batch b;
      e = in->data.Purge(&b);
      if (!e) {
        Status s = store_->Commit(b, false);
        if (s.ok())
          in->purged = true;
        else
          e = EIO;
      }
    } else {
      e = in->data.Finalize(false);
    }
    if (e && first.ok()) first = Status::IOError("flushing inode " + std::to_string(in->ino) + " failed");
  }
  if (!opts_.read_only && m.data.delta) {
    if (uint64_t n = m.data.delta->Pending())
      spdlog::info("lmcfs: finishing {} queued delta rebases before unmount", n);
    m.data.delta->Flush();
  }
  if (!opts_.read_only) {
    store::Batch b;
    std::string n;
    {
      std::lock_guard lk(m.table_mu);
      AppendLE64(&n, m.next_ino);
    }
    b.Put(store::Cf::kMeta, kMetaNextIno, n);
    Status s = store_->Commit(b, true);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

}  // namespace lmc::fs
