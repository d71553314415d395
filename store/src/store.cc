// Store: open and recovery, group commit, verified reads.
// docs/ARCHITECTURE.md, "The chunk store" describes the protocol this file implements.
#include <rocksdb/env.h>
#include <rocksdb/file_checksum.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include "env_rocks_fs.h"
#include "lmc/bytes.h"
#include "lmc/container.h"
#include "lmc/hash.h"
#include "lmc/store/extent.h"
#include "lmc/store/frame_pool.h"
#include "lmc/text.h"
#include "lmc/version.h"
#include "owner_only_fs.h"
#include "rocks_view.h"
#include "store_impl.h"

namespace lmc::store {

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  std::string m = what + ": " + s.ToString();
  if (s.IsNoSpace()) return Status::NoSpace(m);
  if (s.IsCorruption()) return Status::Corruption(m);
  if (s.IsNotFound()) return Status::NotFound(m);
  if (s.IsBusy() || s.IsTryAgain()) return Status::Busy(m);
  return Status::IOError(m);
}

// ---------------------------------------------------------------- Batch

namespace {
std::string CopyFrame(std::span<const uint8_t> frame) {
  return {reinterpret_cast<const char*>(frame.data()), frame.size()};
}
}  // namespace

void Batch::Append(Op op) {
  // A matched chunk has no frame; its bytes are held until the commit.
  frame_bytes_ += op.frame.empty() && op.raw ? op.raw->size() : op.frame.size();
  ops_.push_back(std::move(op));
}

void Batch::AddChunk(const ChunkKey& key, std::span<const uint8_t> frame, uint32_t decoded_len,
                     const std::optional<ChunkKey>& base, KeyOwner owner) {
  Append({.kind = OpKind::kAdd,
          .key = key,
          .base = base,
          .decoded_len = decoded_len,
          .owner = owner,
          .frame = CopyFrame(frame)});
}

void Batch::AddChunk(const ChunkKey& key, std::string&& frame, uint32_t decoded_len,
                     const std::optional<ChunkKey>& base, KeyOwner owner,
                     const std::optional<RecordSeal>& seal) {
  Append({.kind = OpKind::kAdd,
          .key = key,
          .base = base,
          .decoded_len = decoded_len,
          .owner = owner,
          .frame = std::move(frame),
          .seal = seal});
}

RecordSeal SealRecord(const ChunkKey& key, std::span<const uint8_t> frame, uint32_t decoded_len,
                      KeyOwner owner) {
  RecordSeal s{.key = key,
               .frame_len = static_cast<uint32_t>(frame.size()),
               .decoded_len = decoded_len,
               .owner = owner};
  uint8_t hdr[fmt::kRecordHeaderSize];
  fmt::EncodeRecordHeader(hdr, key, frame.data(), s.frame_len, decoded_len, owner);
  s.checksum = LoadLE64(hdr + fmt::kRecordChecksumOffset);
  return s;
}

void Batch::AddMatchedChunk(const ChunkKey& key, const ChunkMatch& match, ChunkBytes raw, KeyOwner owner) {
  const auto len = static_cast<uint32_t>(raw ? raw->size() : 0);
  Append({.kind = OpKind::kAdd,
          .key = key,
          .decoded_len = len,
          .owner = owner,
          .raw = std::move(raw),
          .match_pack = match.pack_id,
          .match_offset = match.offset});
}

void Batch::Ref(const ChunkKey& key) { Append({.kind = OpKind::kRef, .key = key}); }

void Batch::Unref(const ChunkKey& key) { Append({.kind = OpKind::kUnref, .key = key}); }

void Batch::Put(Cf cf, std::string_view key, std::string_view value) {
  Append({.kind = OpKind::kPut, .cf = cf, .cf_key = std::string(key), .value = std::string(value)});
}

void Batch::Delete(Cf cf, std::string_view key) {
  Append({.kind = OpKind::kDelete, .cf = cf, .cf_key = std::string(key)});
}

void Batch::Unpin(const ChunkKey& key) { Append({.kind = OpKind::kUnpin, .key = key}); }

void Batch::RewriteChunk(const ChunkKey& key, std::span<const uint8_t> frame,
                         const std::optional<ChunkKey>& base) {
  Append({.kind = OpKind::kRewrite, .key = key, .base = base, .frame = CopyFrame(frame)});
}

void Batch::RebaseChunk(const ChunkKey& key, std::span<const uint8_t> frame, const ChunkKey& base,
                        uint8_t max_depth) {
  Append(
      {.kind = OpKind::kRebase, .key = key, .base = base, .max_depth = max_depth, .frame = CopyFrame(frame)});
}

Batch::~Batch() { Clear(); }

Batch::Batch(Batch&& o) noexcept : ops_(std::move(o.ops_)), frame_bytes_(std::exchange(o.frame_bytes_, 0)) {
  o.ops_.clear();
}

Batch& Batch::operator=(Batch&& o) noexcept {
  if (this != &o) {
    Clear();
    ops_ = std::move(o.ops_);
    frame_bytes_ = o.frame_bytes_;
    o.ops_.clear();
    o.frame_bytes_ = 0;
  }
  return *this;
}

void Batch::Clear() {
  // The frames' buffers go back to the pool for the next encodes.
  for (Op& op : ops_)
    if (op.frame.capacity() >= kFramePoolMinBytes) GiveFrameBuffer(std::move(op.frame));
  ops_.clear();
  frame_bytes_ = 0;
}

void Batch::Absorb(Batch&& later) {
  ops_.reserve(ops_.size() + later.ops_.size());
  for (Op& op : later.ops_) ops_.push_back(std::move(op));
  frame_bytes_ += later.frame_bytes_;
  later.Clear();
}

// ---------------------------------------------------------------- Open

namespace {

constexpr const char* kFsCfNames[4] = {"inodes", "dirents", "extents", "meta"};
// The index's memory and WAL bounds (see OpenIndex).
constexpr size_t kMemtableBytes = size_t{1} << 20;
// The index's block caches (see OpenIndex): chunk keys, and the rest.
constexpr size_t kChunkBlockCacheBytes = size_t{64} << 20;
constexpr size_t kMetaBlockCacheBytes = size_t{8} << 20;
constexpr uint64_t kMaxWalBytes = uint64_t{4} << 20;

// The format of a new store: 4 with XXH3 keys; with SHA-256 keys, 1 (an
// older lmcfs reads it), or 3 with index_journal=1 (an lmcfs that would
// write the index without appending to the journal must refuse it).
uint32_t NewStoreVersion(bool journaled, const KeyScheme& keys) {
  if (keys.verify_hits()) return fmt::kFormatVersionFastKeys;
  return journaled ? fmt::kFormatVersionJournal : fmt::kFormatVersionFirst;
}

// A new store's CONFIG.
std::string ConfigText(const StoreOptions& o, bool journaled, const KeyScheme& keys) {
  const std::string hash =
      keys.verify_hits()
          ? "hash=xxh3-128\nhash_secret=" + HexOf(keys.secret().data(), keys.secret().size()) + "\n"
          : "hash=sha256\n";
  return "# lmcfs chunk store (docs/FORMAT.md, section Chunk store). Do not edit.\n"
         "format_version=" +
         std::to_string(NewStoreVersion(journaled, keys)) + "\n" + hash +
         "chunk_size=" + std::to_string(o.chunk_size) + "\n" + (journaled ? "index_journal=1\n" : "");
}

Status CheckConfig(const std::string& text, const std::string& path, uint32_t* version_out, bool* journal_out,
                   KeyScheme* keys_out) {
  int version = -1;
  std::string hash, secret_hex;
  *journal_out = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty() || line[0] == '#') continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos)
      return Status::Corruption(path + ": malformed line '" + EscapeBytes(line, true) + "'");
    std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    if (k == "format_version") version = std::atoi(v.c_str());
    if (k == "hash") hash = v;
    if (k == "hash_secret") secret_hex = v;
    if (k == "index_journal") *journal_out = v == "1";
  }
  if (version < 1) return Status::Corruption(path + ": no format_version");
  if (version > static_cast<int>(fmt::kFormatVersion))
    return Status::Unsupported(path + ": store format " + std::to_string(version) +
                               " is newer than this lmcfs reads (" + std::to_string(fmt::kFormatVersion) +
                               "); upgrade lmcfs");
  if (hash == "sha256") {
    *keys_out = KeyScheme();
  } else if (hash == "xxh3-128") {
    if (version < static_cast<int>(fmt::kFormatVersionFastKeys))
      return Status::Corruption(path + ": hash=xxh3-128 in a store of format " + std::to_string(version));
    std::array<uint8_t, KeyScheme::kSecretSize> secret{};
    if (!ParseHex(secret_hex, secret.data(), secret.size()))
      return Status::Corruption(path + ": hash_secret is not " + std::to_string(2 * secret.size()) +
                                " hex digits. Without it no chunk of this store can be written or "
                                "checked: restore CONFIG from a copy of it");
    *keys_out = KeyScheme::Xxh3(secret);
  } else {
    return Status::Unsupported(path + ": unknown chunk hash '" + EscapeBytes(hash, true) + "'");
  }
  if (*journal_out && version < static_cast<int>(fmt::kFormatVersionJournal))
    return Status::Corruption(path + ": index_journal=1 in a store of format " + std::to_string(version));
  *version_out = static_cast<uint32_t>(version);
  return Status::Ok();
}

// `dir` with every link and "." or ".." resolved (realpath). A store yet to
// be created resolves through its parent, which must exist.
constexpr uint64_t kRadosPackLimit = uint64_t{32} << 20;
constexpr uint64_t kRadosGroupBytes = uint64_t{32} << 20;

Result<std::string> RealPath(const std::string& dir, bool create_if_missing) {
  if (char* r = ::realpath(dir.c_str(), nullptr)) {
    std::string out = r;
    std::free(r);
    return out;
  }
  if (errno != ENOENT) return Status::FromErrno(errno, "resolving the store path " + dir);
  if (!create_if_missing) return Status::NotFound("no store at " + dir);
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const size_t slash = d.rfind('/');
  const std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : d.substr(0, slash);
  char* r = ::realpath(parent.c_str(), nullptr);
  if (!r) return Status::FromErrno(errno, "cannot create store " + dir + ": its parent directory " + parent);
  std::string out = r;
  std::free(r);
  return (out == "/" ? "" : out) + "/" + d.substr(slash + 1);
}

}  // namespace

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

Store::Impl::~Impl() {
  StopPuncher();
  if (db && journal && !opts.read_only && journal->bytes_since_snapshot() >= opts.journal_snapshot_bytes &&
      (!rados || rados->LockHeld())) {
    std::lock_guard l(journal_mu);
    if (Status st = SnapshotIndex(); !st.ok())
      spdlog::warn("store {}: index snapshot at close failed ({}); the next open replays the journal", dir,
                   st.ToString());
  }
  CloseIndex();
}

void Store::Impl::CloseIndex() {
  if (db) {
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h).PermitUncheckedError();
    handles.clear();
    const bool clean = db->Close().ok();
    delete db;
    db = nullptr;
    if (clean && !opts.read_only) WriteManifestSum();
  }
}

// RocksDB reads a MANIFEST whose last record's header rotted (a length past
// the end) as a torn tail: it drops those edits, a flush say, and opens
// without an error, short of what it acknowledged (the files of a column
// family read as holes). A torn tail is only a crash's, so a clean close
// records the MANIFEST's name, size and XXH3 beside the index (index.sum),
// and the next open checks them before RocksDB reads it, then removes the
// record (RocksDB writes a new MANIFEST at every open). After a crash there
// is no record and nothing to check.
namespace {
std::string IndexSumPath(const std::string& index_dir) { return index_dir + ".sum"; }
Result<std::string> ManifestSumText(Env* env, const std::string& index_dir) {
  LMC_ASSIGN_OR_RETURN(std::string current, ReadFileToString(env, index_dir + "/CURRENT"));
  while (!current.empty() && (current.back() == '\n' || current.back() == '\r')) current.pop_back();
  if (current.rfind("MANIFEST-", 0) != 0 || current.find('/') != std::string::npos)
    return Status::Corruption(index_dir + "/CURRENT does not name a MANIFEST");
  LMC_ASSIGN_OR_RETURN(std::string m, ReadFileToString(env, index_dir + "/" + current));
  char sum[17];
  std::snprintf(sum, sizeof sum, "%016llx",
                static_cast<unsigned long long>(hash::Xxh3_64(m.data(), m.size())));
  return current + " " + std::to_string(m.size()) + " " + sum + "\n";
}
}  // namespace

Env* Store::Impl::IndexFileEnv() const { return opts.index_on_env && opts.env ? opts.env : Env::Default(); }

void Store::Impl::WriteManifestSum() {
  Env* e = IndexFileEnv();
  auto text = ManifestSumText(e, index_dir);
  const size_t slash = index_dir.rfind('/');
  Status st =
      text.ok() ? WriteFileAtomic(e, index_dir.substr(0, slash), index_dir.substr(slash + 1) + ".sum", *text)
                : text.status();
  if (!st.ok())
    spdlog::warn(
        "store {}: recording the index's MANIFEST checksum at close failed ({}); the next open "
        "cannot check it",
        dir, st.ToString());
}

Status Store::Impl::CheckManifestSum() {
  Env* e = IndexFileEnv();
  const std::string path = IndexSumPath(index_dir);
  if (!e->FileExists(path)) return Status::Ok();
  LMC_ASSIGN_OR_RETURN(std::string want, ReadFileToString(e, path));
  auto have = ManifestSumText(e, index_dir);
  // CURRENT naming another MANIFEST: RocksDB's own checks decide.
  if (!have.ok() || have->substr(0, have->find(' ')) != want.substr(0, want.find(' '))) return Status::Ok();
  if (*have == want) return Status::Ok();
  return IndexDamaged(rocksdb::Status::Corruption(
      "its MANIFEST changed after the store was last closed (recorded " + want.substr(0, want.size() - 1) +
      ", now " + have->substr(0, have->size() - 1) + ")"));
}

Result<std::unique_ptr<Store>> Store::Open(const std::string& dir, const StoreOptions& options) {
  auto s = std::make_unique<Impl>();
  s->opts = options;
  if (options.base_cache_bytes > 0) s->base_cache = std::make_unique<ChunkCache>(options.base_cache_bytes);
  s->codec = options.codec ? options.codec : LmcFrameCodec();
  if (s->opts.pack_size_limit < 4096) s->opts.pack_size_limit = 4096;
  if (IsRadosSpec(dir)) {
    LMC_ASSIGN_OR_RETURN(RadosSpec spec, ParseRadosSpec(dir));
    s->dir = "rados:" + spec.pool + "/" + spec.name;
    if (!options.env) {
      RadosOptions ro = options.rados;
      ro.read_only = options.read_only;
      LMC_ASSIGN_OR_RETURN(std::unique_ptr<RadosEnv> re, RadosEnv::Open(s->dir, ro));
      s->rados = re.get();
      s->owned_env = std::move(re);
    }
    s->opts.journal = true;
    // A RADOS object holds at most osd_max_object_size (128 MiB by
    // default): a pack is sealed once past kRadosPackLimit and a commit
    // group adds at most kRadosGroupBytes more (plus one record).
    s->opts.pack_size_limit = std::min(s->opts.pack_size_limit, kRadosPackLimit);
    s->opts.pack_size_floor = std::min(s->opts.pack_size_floor, s->opts.pack_size_limit);
    s->opts.max_group_bytes = std::min(s->opts.max_group_bytes, kRadosGroupBytes);
  } else {
    // The store by its real path: every path under it is then free of links,
    // and the Env refuses any it meets (a planted one; no_links.h).
    auto real = RealPath(dir, options.create_if_missing);
    if (!real.ok()) return real.status();
    s->dir = *real;
  }
  s->env = options.env ? options.env : s->owned_env ? s->owned_env.get() : Env::Default();
  Env* env = s->env;
  s->pack_dir = s->dir + "/" + fmt::kPackDir;
  s->local_dir = s->opts.local_dir.empty() ? LocalDirOf(s->dir) : s->opts.local_dir;
  if (s->opts.read_only) {
    // A follower: no lock (the writer holds it), no change to the store.
    if (!env->FileExists(s->dir + "/" + fmt::kConfigName)) return Status::NotFound("no store at " + s->dir);
  } else {
    if (!env->FileExists(s->dir)) LMC_RETURN_IF_ERROR(env->CreateDir(s->dir));
    LMC_ASSIGN_OR_RETURN(s->lock, env->LockFile(s->dir + "/" + fmt::kLockName));
  }

  const std::string config_path = s->dir + "/" + fmt::kConfigName;
  const bool fresh = !env->FileExists(config_path);
  bool config_journal = false;
  if (!fresh) {
    LMC_ASSIGN_OR_RETURN(std::string text, ReadFileToString(env, config_path));
    LMC_RETURN_IF_ERROR(CheckConfig(text, config_path, &s->format_version, &config_journal, &s->keys));
  } else if (s->opts.fast_keys_new_stores) {
    s->keys = KeyScheme::Xxh3(KeyScheme::NewSecret());
  }
  // A POSIX store is journaled when its CONFIG says so, or when it is new
  // and journal_new_stores (the default); RADOS stores always are.
  if (config_journal || (fresh && s->opts.journal_new_stores)) s->opts.journal = true;
  const bool write_journal_key = fresh && s->opts.journal && !IsRadosSpec(dir);
  s->index_dir = (s->opts.journal ? s->local_dir : s->dir) + "/" + fmt::kIndexDir;
  if (s->opts.read_only && !s->opts.journal)
    return Status::InvalidArgument("store " + s->dir + ": read-only opens are for journaled stores");
  if (fresh) {
    if (!options.create_if_missing) return Status::NotFound("no store at " + s->dir + " (no CONFIG)");
    // CONFIG is written last when creating: a directory with packs but no
    // CONFIG is not something we made, or not something to overwrite.
    auto names = env->ListDir(s->pack_dir);
    if (names.ok()) {
      for (const auto& n : *names)
        if (fmt::ParsePackFileName(n))
          return Status::Corruption(s->dir +
                                    " has pack files but no CONFIG; refusing to create a store over them");
    }
    LMC_RETURN_IF_ERROR(env->CreateDir(s->pack_dir));
  } else {
    if (!s->opts.journal && !env->FileExists(s->index_dir + "/CURRENT"))
      return Status::Corruption(s->dir + ": the index (" + fmt::kIndexDir +
                                "/) is missing; refusing to open a store whose packs have no index");
  }
  if (s->opts.journal) {
    LMC_RETURN_IF_ERROR(s->OpenJournaled(fresh));
  } else {
    LMC_RETURN_IF_ERROR(s->OpenIndex(fresh));
  }
  if (fresh) {
    LMC_RETURN_IF_ERROR(
        WriteFileAtomic(env, s->dir, fmt::kConfigName, ConfigText(options, write_journal_key, s->keys)));
    s->format_version = NewStoreVersion(write_journal_key, s->keys);
  }
  Status recovered = s->Recover();
  if (!recovered.ok() && s->index_differs && s->opts.rebuild_damaged_index && !s->opts.read_only) {
    // lmcfs-fsck --repair: make the index again from the journal, then recover.
    s->CloseIndex();
    s->journal.reset();
    s->opts.rebuild_index = true;
    s->index_differs = false;
    LMC_RETURN_IF_ERROR(s->OpenJournaled(false));
    recovered = s->Recover();
  }
  LMC_RETURN_IF_ERROR(recovered);
  if (!s->opts.read_only) {
    LMC_RETURN_IF_ERROR(s->EnsureDependantsIndex(fresh));
    LMC_RETURN_IF_ERROR(s->ReapPinnedDead());
    // A RADOS store caches its packs' holes (a round trip to learn each).
    s->cache_holes = IsRadosSpec(s->dir);
    if (s->opts.punch_dead) s->StartPuncher();
  } else if (IsRadosSpec(s->dir)) {
    // A follower counts the writer's holes, read from the cluster.
    s->cache_holes = true;
    s->StartHolesFollower();
  }
  return std::unique_ptr<Store>(new Store(std::move(s)));
}

Status Store::Impl::UpgradeFormat() {
  const std::string path = dir + "/" + fmt::kConfigName;
  LMC_ASSIGN_OR_RETURN(std::string text, ReadFileToString(env, path));
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(pos, nl - pos);
    out += line.rfind("format_version=", 0) == 0
               ? "format_version=" + std::to_string(fmt::kFormatVersionOwnerKeys)
               : line;
    out += '\n';
    pos = nl + 1;
  }
  LMC_RETURN_IF_ERROR(WriteFileAtomic(env, dir, fmt::kConfigName, out));
  spdlog::info(
      "store {}: format {} -> {} (owner-scoped chunk keys, dedup=uid); lmcfs before this version "
      "refuses it",
      dir, format_version, fmt::kFormatVersionOwnerKeys);
  format_version = fmt::kFormatVersionOwnerKeys;
  return Status::Ok();
}

namespace {

// RocksDB's background errors (a failed WAL append, memtable flush or
// compaction: on a full disk, NoSpace) stop every later index write. They
// are logged here, and RocksDB's own recovery is turned off: it polls the
// free space every 5 s and makes DB::Resume answer Busy meanwhile. The
// store resumes the index itself at the next write, once its reserve is
// free again (Store::Impl::ResumeIndex).
// RocksDB's info log goes to the daemon's log at debug level (fatal lines
// at error level), not to its own LOG file in index/: on a full disk a
// failed append leaves that file's writer in an error state, and the next
// line RocksDB logs (the one reporting the error) trips an assertion of
// the library (WritableFileWriter::AssertFalseAndGetStatusForPrevError):
// the daemon aborted on its first full-disk index write.
class RocksToSpdlog : public rocksdb::Logger {
 public:
  RocksToSpdlog() : rocksdb::Logger(rocksdb::InfoLogLevel::DEBUG_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level == rocksdb::InfoLogLevel::HEADER_LEVEL) return;  // the options, at every open
    const bool fatal = level == rocksdb::InfoLogLevel::FATAL_LEVEL;
    if (!fatal && !spdlog::should_log(spdlog::level::debug)) return;
    char line[1024];
    std::vsnprintf(line, sizeof line, format, ap);
    spdlog::log(fatal ? spdlog::level::err : spdlog::level::debug, "rocksdb: {}", line);
  }
  void Logv(const char* format, va_list ap) override { Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap); }
};

class IndexErrorListener : public rocksdb::EventListener {
 public:
  explicit IndexErrorListener(std::string dir) : dir_(std::move(dir)) {}
  void OnBackgroundError(rocksdb::BackgroundErrorReason, rocksdb::Status* bg_error) override {
    spdlog::error(
        "store {}: the index (RocksDB) stopped accepting writes: {}; lmcfs resumes it at the next write "
        "once there is room (or, after another error, at the next mount)",
        dir_, bg_error->ToString());
  }
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason, rocksdb::Status bg_error,
                            bool* auto_recovery) override {
    bg_error.PermitUncheckedError();
    *auto_recovery = false;
  }

 private:
  const std::string dir_;
};

}  // namespace

Status Store::Impl::OpenIndex(bool fresh) {
  rocksdb::DBOptions dbo;
  dbo.create_if_missing = fresh;
  // Every column family exists from a store's first open on: one missing
  // later means a damaged MANIFEST (a flipped length makes its last records
  // read as a torn tail, which RocksDB drops), and creating it empty would
  // serve the files that it described as holes.
  dbo.create_missing_column_families = fresh;
  dbo.paranoid_checks = true;
  // A write-ahead log damaged before its last record fails the open (an
  // "index ... is damaged" error): RocksDB's default replays up to the
  // damage and opens without a word, and Recover would then cut the packs
  // back to that shorter index, losing every later commit for good. Only
  // a torn last record, what a crash mid-append leaves, is dropped (its
  // commit never returned).
  dbo.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  // Owner-only files and directories, as the rest of the store
  // (docs/ARCHITECTURE.md, "Store permissions").
  dbo.env = OwnerOnlyRocksEnv();
  if (opts.index_on_env && opts.env) {
    if (!index_env) index_env = NewRocksEnvOverStoreEnv(opts.env);
    dbo.env = index_env.get();
  }
  // Sized for a metadata store, not for RocksDB's defaults (a large
  // database): the index directory stays proportional to the metadata
  // (docs/ARCHITECTURE.md, "Index size"). No preallocation (RocksDB would
  // fallocate each WAL to 1.1 x write_buffer_size and the MANIFEST to 4
  // MiB); small memtables, and at most kMaxWalBytes of WAL before the
  // column families holding it are flushed; the info log in the daemon's.
  dbo.allow_fallocate = false;
  dbo.manifest_preallocation_size = 64 << 10;
  dbo.max_total_wal_size = kMaxWalBytes;
  dbo.info_log = std::make_shared<RocksToSpdlog>();
  // A whole-file checksum of every table file RocksDB writes (in its
  // MANIFEST), verified at open before any block of it is parsed: a damaged
  // index file is an error that names it, never a parser's assertion
  // (docs/ARCHITECTURE.md, "Recovery"; scripts/rot_run.py found one).
  dbo.file_checksum_gen_factory = rocksdb::GetFileChecksumGenCrc32cFactory();
  dbo.listeners.push_back(std::make_shared<IndexErrorListener>(dir));
  dbo.statistics = rocksdb::CreateDBStatistics();
  dbo.statistics->set_stats_level(rocksdb::StatsLevel::kExceptDetailedTimers);
  rocks_stats = dbo.statistics;
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  // Two block caches of fixed capacity, held here so that their use can be
  // reported (Stats): RocksDB's default table options (an internal 8 MiB
  // cache) for the metadata column families, and for the chunk keys what
  // ColumnFamilyOptions::OptimizeForPointLookup(64) sets up, spelled out.
  // Index and filter blocks stay outside the caches (RocksDB's default):
  // their memory is the table readers' (index_table_reader_bytes).
  rocksdb::ColumnFamilyOptions cfo;
  cfo.write_buffer_size = kMemtableBytes;
  rocksdb::BlockBasedTableOptions meta_table;
  meta_blocks = rocksdb::NewLRUCache(kMetaBlockCacheBytes);
  meta_table.block_cache = meta_blocks;
  cfo.table_factory.reset(rocksdb::NewBlockBasedTableFactory(meta_table));
  // Most chunk lookups on the write path are misses (new chunks): a bloom
  // filter answers those without reading blocks, and a hash index inside
  // each data block finds a hit without a binary search.
  rocksdb::ColumnFamilyOptions chunk_cfo;
  rocksdb::BlockBasedTableOptions table;
  table.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
  table.data_block_hash_table_util_ratio = 0.75;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.whole_key_filtering = true;
  chunk_blocks = rocksdb::NewLRUCache(kChunkBlockCacheBytes);
  table.block_cache = chunk_blocks;
  chunk_cfo.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  chunk_cfo.memtable_prefix_bloom_size_ratio = 0.02;
  chunk_cfo.memtable_whole_key_filtering = true;
  chunk_cfo.write_buffer_size = kMemtableBytes;
  cfs.emplace_back(rocksdb::kDefaultColumnFamilyName, cfo);
  cfs.emplace_back("chunks", chunk_cfo);
  cfs.emplace_back("packs", cfo);
  for (const char* n : kFsCfNames) cfs.emplace_back(n, cfo);
  if (!fresh) {
    LMC_RETURN_IF_ERROR(CheckManifestSum());
  } else if (IndexFileEnv()->FileExists(IndexSumPath(index_dir))) {
    // A record of an index that is gone (destroyed, moved aside).
    LMC_RETURN_IF_ERROR(IndexFileEnv()->DeleteFile(IndexSumPath(index_dir)));
  }
  rocksdb::Status rs = rocksdb::DB::Open(dbo, index_dir, cfs, &handles, &db);
  if (rs.ok() && IndexFileEnv()->FileExists(IndexSumPath(index_dir))) {
    // RocksDB has written a new MANIFEST: the record of the old one goes.
    const size_t slash = index_dir.rfind('/');
    Status del = IndexFileEnv()->DeleteFile(IndexSumPath(index_dir));
    if (del.ok()) del = IndexFileEnv()->SyncDir(index_dir.substr(0, slash));
    if (!del.ok()) {
      CloseIndex();
      return del;
    }
  }
  if (!rs.ok()) {
    db = nullptr;
    if (rs.IsCorruption()) return IndexDamaged(rs);
    if (!fresh && rs.IsInvalidArgument() && rs.ToString().find("olumn famil") != std::string::npos)
      return IndexDamaged(rs);
    // CURRENT naming a MANIFEST that is not there: RocksDB never leaves
    // that behind by itself (a flipped byte in CURRENT's file name).
    if (!fresh && (rs.IsPathNotFound() || rs.IsIOError()) &&
        rs.ToString().find("MANIFEST") != std::string::npos)
      return IndexDamaged(rs);
    return FromRocks(rs, "opening index " + index_dir);
  }
  if (Status v = VerifyIndexFiles(); !v.ok()) {
    CloseIndex();
    return v;
  }
  chunks_cf = handles[1];
  packs_cf = handles[2];
  for (size_t i = 0; i < 4; ++i) fs_cf[i] = handles[3 + i];
  return Status::Ok();
}

// The whole-file checksums of the index's table files (those written since
// checksums were turned on; older files have none and are skipped by
// RocksDB), read as raw bytes: no block is parsed.
Status Store::Impl::VerifyIndexFiles() {
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  rocksdb::Status rs = db->VerifyFileChecksums(ro);
  if (rs.ok() || rs.IsNotSupported()) return Status::Ok();
  return IndexDamaged(rs);
}

// RocksDB found its own files damaged (lmcfs-fsck recognises " is damaged").
Status Store::Impl::IndexDamaged(const rocksdb::Status& rs) const {
  if (journal)
    return Status::Corruption("index " + index_dir + " is damaged: " + rs.ToString() +
                              "; the store's journal holds every index change: lmcfs-fsck --repair " + dir +
                              " rebuilds the index from it");
  return Status::Corruption("index " + index_dir + " is damaged: " + rs.ToString());
}

// Recovery (docs/ARCHITECTURE.md, "The chunk store", "Recovery"): the index is the truth.
// Pack bytes past a pack's committed size and pack files the index does not
// know were never acknowledged to anyone; retired packs finish dying.
Status Store::Impl::Recover() {
  uint64_t max_id = 0;
  rocksdb::WriteBatch fixes;
  std::set<uint64_t> to_delete;
  {
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), packs_cf));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      auto id = fmt::ParsePackKey(it->key().ToStringView());
      if (!id) return Status::Corruption("pack index key of bad length in " + dir);
      auto m = fmt::DecodePackMeta(*id, it->value().ToStringView());
      if (!m.ok()) return Status::Corruption("pack " + std::to_string(*id) + ": " + m.status().message());
      max_id = std::max(max_id, *id);
      if (m->state == fmt::PackState::kRetired) {
        to_delete.insert(*id);
        fixes.Delete(packs_cf, it->key());
        continue;
      }
      packs[*id] = *m;
    }
    LMC_RETURN_IF_ERROR(FromRocks(it->status(), "reading pack index"));
  }
  next_pack_id = max_id + 1;
  // A reader of another node's store changes nothing in it.
  if (opts.read_only) return Status::Ok();
  LMC_ASSIGN_OR_RETURN(std::vector<std::string> names, env->ListDir(pack_dir));
  // Deleting or cutting pack bytes is what this step does, on the index's
  // word. An index that lost entries without an error (RocksDB dropping a
  // MANIFEST edit it read as a torn tail) would have it delete packs that
  // hold live chunks: the index's packs must first agree with its journal.
  bool destructive = !to_delete.empty();
  for (const auto& n : names) {
    auto id = fmt::ParsePackFileName(n);
    if (!id || destructive) continue;
    auto pm = packs.find(*id);
    if (pm == packs.end()) {
      destructive = true;
    } else {
      LMC_ASSIGN_OR_RETURN(std::unique_ptr<File> f, env->OpenFile(pack_dir + "/" + n, Env::OpenMode::kRead));
      destructive = f->Size() > pm->second.size;
    }
  }
  if (destructive && journal) LMC_RETURN_IF_ERROR(CheckPacksAgainstJournal());
  bool dir_changed = false;
  for (const auto& n : names) {
    auto id = fmt::ParsePackFileName(n);
    if (!id) continue;
    max_id = std::max(max_id, *id);
    const std::string path = pack_dir + "/" + n;
    auto pm = packs.find(*id);
    if (pm == packs.end()) {
      if (!to_delete.count(*id))
        spdlog::info(
            "store {}: deleting pack {} that no commit ever referenced (crash before its first commit)", dir,
            path);
      LMC_RETURN_IF_ERROR(env->DeleteFile(path));
      dir_changed = true;
      continue;
    }
    LMC_ASSIGN_OR_RETURN(std::unique_ptr<File> f, env->OpenFile(path, Env::OpenMode::kReadWrite));
    if (f->Size() > pm->second.size) {
      spdlog::info("store {}: pack {}: cutting {} uncommitted bytes after offset {} (crash during a commit)",
                   dir, path, f->Size() - pm->second.size, pm->second.size);
      LMC_RETURN_IF_ERROR(f->Truncate(pm->second.size));
      LMC_RETURN_IF_ERROR(f->Sync());
    } else if (f->Size() < pm->second.size) {
      spdlog::error(
          "store {}: pack {} is {} bytes but the index says {} were committed; its last chunks will read as "
          "corrupt (run fsck)",
          dir, path, f->Size(), pm->second.size);
    }
  }
  for (const auto& [id, m] : packs) {
    if (!env->FileExists(PackPath(id)))
      spdlog::error("store {}: pack {} is in the index but its file is missing (run fsck)", dir,
                    PackPath(id));
  }
  if (dir_changed) LMC_RETURN_IF_ERROR(env->SyncDir(pack_dir));
  if (fixes.Count() > 0) LMC_RETURN_IF_ERROR(WriteIndex(fixes, true));
  next_pack_id = max_id + 1;
  return Status::Ok();
}

namespace {

// The puts and deletes one journal record makes in one column family.
class FamilyCollector : public rocksdb::WriteBatch::Handler {
 public:
  FamilyCollector(uint32_t cf, std::map<std::string, std::string>* out) : cf_(cf), out_(out) {}
  rocksdb::Status PutCF(uint32_t cf, const rocksdb::Slice& k, const rocksdb::Slice& v) override {
    if (cf == cf_) (*out_)[k.ToString()] = v.ToString();
    return rocksdb::Status::OK();
  }
  rocksdb::Status DeleteCF(uint32_t cf, const rocksdb::Slice& k) override {
    if (cf == cf_) out_->erase(k.ToString());
    return rocksdb::Status::OK();
  }
  rocksdb::Status SingleDeleteCF(uint32_t cf, const rocksdb::Slice& k) override { return DeleteCF(cf, k); }
  rocksdb::Status MergeCF(uint32_t cf, const rocksdb::Slice&, const rocksdb::Slice&) override {
    return cf == cf_ ? rocksdb::Status::NotSupported("a merge in the index journal") : rocksdb::Status::OK();
  }
  rocksdb::Status DeleteRangeCF(uint32_t cf, const rocksdb::Slice&, const rocksdb::Slice&) override {
    return cf == cf_ ? rocksdb::Status::NotSupported("a range delete in the index journal")
                     : rocksdb::Status::OK();
  }

 private:
  uint32_t cf_;
  std::map<std::string, std::string>* out_;
};

}  // namespace

Status Store::Impl::CheckPacksAgainstJournal() {
  std::map<std::string, std::string> want;
  const uint32_t cf = packs_cf->GetID();
  Status st = journal->LoadSnapshot([&](uint32_t c, std::string_view k, std::string_view v) -> Status {
    if (c == cf) want[std::string(k)] = std::string(v);
    return Status::Ok();
  });
  if (st.ok())
    st = journal->ForEachRecord([&](uint64_t, std::string_view data) -> Status {
      rocksdb::WriteBatch wb{std::string(data)};
      FamilyCollector c(cf, &want);
      return FromRocks(wb.Iterate(&c), "reading the index journal");
    });
  if (!st.ok()) {
    // A damaged journal cannot say; the index is all there is.
    spdlog::warn(
        "store {}: the index journal cannot be read to check the packs the index names ({}); "
        "trusting the index",
        dir, st.ToString());
    return Status::Ok();
  }
  std::map<std::string, std::string> have;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), packs_cf));
  for (it->SeekToFirst(); it->Valid(); it->Next()) have[it->key().ToString()] = it->value().ToString();
  LMC_RETURN_IF_ERROR(FromRocks(it->status(), "reading pack index"));
  if (have == want) return Status::Ok();
  size_t differ = 0;
  for (const auto& [k, v] : want) differ += !have.count(k) || have[k] != v;
  for (const auto& [k, v] : have) differ += !want.count(k);
  index_differs = true;
  return Status::Corruption("index " + index_dir + " differs from its journal in the packs it names (" +
                            std::to_string(differ) +
                            " entries; RocksDB lost entries without an error): nothing was deleted; "
                            "lmcfs-fsck --repair " +
                            dir + " rebuilds the index from the journal");
}

Status Store::Impl::ReapPinnedDead() {
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), handles[0]));
  const std::string_view prefix = fmt::kPinnedDeadPrefix;
  size_t n = 0;
  for (it->Seek(rocksdb::Slice(prefix.data(), prefix.size())); it->Valid(); it->Next()) {
    std::string_view k = it->key().ToStringView();
    if (k.substr(0, prefix.size()) != prefix) break;
    if (k.size() != prefix.size() + ChunkKey::kSize)
      return Status::Corruption("store " + dir + ": malformed pinned-dead marker in the index (run fsck)");
    const ChunkKey key = ChunkKey::FromBytes(reinterpret_cast<const uint8_t*>(k.data() + prefix.size()));
    std::lock_guard l(pin_mu);
    pinned_dead.insert(key);
    reap.insert(key);
    n++;
  }
  LMC_RETURN_IF_ERROR(FromRocks(it->status(), "scanning pinned-dead markers"));
  if (n == 0) return Status::Ok();
  spdlog::info("store {}: dropping {} chunks that only a pin of the previous run kept", dir, n);
  return CommitGroup({});
}

bool Store::Impl::IndexReadOnly(const rocksdb::Status& rs) const {
  // RocksDB keeps errno's text only; ext4 forced read-only after an error
  // (emergency_ro) does not set ST_RDONLY.
  if (rs.ToString().find(std::strerror(EROFS)) != std::string::npos) return true;
  struct statvfs v {};
  return ::statvfs(index_dir.c_str(), &v) == 0 && (v.f_flag & ST_RDONLY) != 0;
}

Status Store::Impl::IndexWriteResult(const rocksdb::Status& rs, const std::string& what) {
  if (rs.ok()) return Status::Ok();
  index_stopped = true;
  Status st = FromRocks(rs, what);
  if (st.IsNoSpace())
    return Status::NoSpace(st.message() +
                           "; the index takes writes again once its filesystem has room: delete files or "
                           "free space on it");
  if (IndexReadOnly(rs))
    return Status::ReadOnly(what + ": " + rs.ToString() + " (the filesystem holding " + index_dir +
                            " is mounted read-only)");
  return st;
}

Status Store::Impl::ResumeIndex() {
  std::lock_guard l(resume_mu);
  if (!index_stopped) return Status::Ok();
  // A resume flushes the memtables: tried only with the reserve free.
  struct statvfs v {};
  if (::statvfs(index_dir.c_str(), &v) == 0 && opts.space_reserve > 0) {
    const uint64_t total = uint64_t{v.f_blocks} * v.f_frsize, avail = uint64_t{v.f_bavail} * v.f_frsize;
    if (avail < ReserveOf(total))
      return Status::NoSpace("store " + dir +
                             ": the index stopped after its filesystem filled up, and it has " +
                             std::to_string(avail) +
                             " bytes free; the index takes writes again once there is room: delete files or "
                             "free space on that filesystem");
  }
  // A resume starts a new WAL only by flushing a memtable: with all of
  // them empty (a failure on the first write after the open) it would go
  // on with the failed WAL writer, whose next append trips an assertion
  // of the library.
  uint64_t active = 0, immutable = 0;
  if (db->GetAggregatedIntProperty("rocksdb.num-entries-active-mem-table", &active) &&
      db->GetAggregatedIntProperty("rocksdb.num-entries-imm-mem-tables", &immutable) &&
      active + immutable == 0)
    return Status::IOError("store " + dir +
                           ": the index stopped on its first write after the open and cannot resume; unmount "
                           "and mount the store again once its filesystem has room");
  rocksdb::Status rs = db->Resume();
  if (rs.ok()) {
    index_stopped = false;
    spdlog::info("store {}: the index takes writes again (resumed after its error)", dir);
    return Status::Ok();
  }
  if (rs.IsNoSpace()) return FromRocks(rs, "store " + dir + ": resuming the index (still no room)");
  const std::string m = "store " + dir + ": the index stopped after an error it cannot resume from (" +
                        rs.ToString() + "); unmount and mount the store again (the open replays its log)";
  if (IndexReadOnly(rs)) return Status::ReadOnly(m + "; the filesystem holding it is mounted read-only");
  return Status::IOError(m);
}

Status Store::Impl::WriteIndex(rocksdb::WriteBatch& wb, bool sync) {
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  if (opts.read_only) return Status::Unsupported("store " + dir + " is open read-only");
  if (index_stopped) LMC_RETURN_IF_ERROR(ResumeIndex());
  if (!journal) return IndexWriteResult(db->Write(wo, &wb), "writing index of " + dir);
  // Journaled: the batch, with the number of its record, is durable in the
  // store's journal before the local index applies it; the local index's
  // own WAL is then never synced (docs/ARCHITECTURE.md, "Stores in RADOS").
  std::lock_guard l(journal_mu);
  if (local_behind)
    return Status::IOError(
        "store " + dir +
        ": an index change reached the journal but not the local index; unmount and remount "
        "(the open replays it)");
  uint8_t seq[8];
  StoreLE64(seq, journal->next_seq());
  wb.Put(handles[0], fmt::kJournalSeqKey, rocksdb::Slice(reinterpret_cast<const char*>(seq), 8));
  // Synced when the commit is (a RADOS append is durable when it returns).
  LMC_RETURN_IF_ERROR(journal->Append(std::string_view(wb.Data()), sync || rados));
  wo.sync = false;
  Status st = IndexWriteResult(db->Write(wo, &wb), "writing the local index of " + dir);
  if (!st.ok()) {
    // The record is in the journal but not in the local index (its disk is
    // full, say): take it back from the journal, so that the commit failed
    // everywhere and the next one may go on once RocksDB resumes. If that
    // fails too, later batches would move the local index's sequence number
    // past the record and it would never be applied here: refuse them; the
    // next open replays it.
    if (Status u = journal->Unappend(); !u.ok()) {
      spdlog::error(
          "store {}: taking an index record back from the journal failed ({}); no index change "
          "is accepted until the store is mounted again",
          dir, u.ToString());
      local_behind = true;
    }
    return st;
  }
  // Followers on other nodes (Store::Refresh) learn of it at once.
  if (rados) rados->Notify(dir + "/journal/HEAD");
  // A snapshot while running once the records since the last one reach
  // four times its size (at least journal_snapshot_bytes): writing
  // snapshots then costs at most a quarter of the journal's own writes, and
  // the journal stays within a few times the index (docs/ARCHITECTURE.md,
  // "The index journal").
  if (journal->bytes_since_snapshot() >=
      std::max(opts.journal_snapshot_bytes, 4 * journal->snapshot_bytes())) {
    if (Status ss = SnapshotIndex(); !ss.ok())
      spdlog::warn("store {}: index snapshot failed ({}); retried after more commits", dir, ss.ToString());
  }
  return Status::Ok();
}

uint64_t Store::Impl::LocalJournalSeq() {
  std::string v;
  if (!db->Get(rocksdb::ReadOptions(), handles[0], fmt::kJournalSeqKey, &v).ok() || v.size() != 8) return 0;
  return LoadLE64(v.data());
}

namespace {

// Writes the journal's last snapshot into `target` (whose column families,
// `handles`, have the ids the journal names) through `wb`, writing it out
// every 4 MiB; what is left in `wb` is the caller's to write (with what it
// adds: the rebuild's journal-id and journal-seq).
Status LoadSnapshotInto(IndexJournal& journal, rocksdb::DB* target,
                        const std::vector<rocksdb::ColumnFamilyHandle*>& handles,
                        const rocksdb::WriteOptions& wo, rocksdb::WriteBatch& wb) {
  std::unordered_map<uint32_t, rocksdb::ColumnFamilyHandle*> by_id;
  for (auto* h : handles) by_id[h->GetID()] = h;
  return journal.LoadSnapshot([&](uint32_t cf, std::string_view k, std::string_view v) -> Status {
    auto it = by_id.find(cf);
    if (it == by_id.end())
      return Status::Corruption("index snapshot names column family " + std::to_string(cf));
    wb.Put(it->second, rocksdb::Slice(k.data(), k.size()), rocksdb::Slice(v.data(), v.size()));
    if (wb.GetDataSize() >= (size_t{4} << 20)) {
      LMC_RETURN_IF_ERROR(FromRocks(target->Write(wo, &wb), "loading the index snapshot"));
      wb.Clear();
    }
    return Status::Ok();
  });
}

}  // namespace

Status Store::Impl::OpenJournaled(bool fresh) {
  auto opened_journal = IndexJournal::Open(env, dir, fresh);
  std::string journal_damage;  // HEAD damaged: the journal is made again from the index below
  if (opened_journal.ok()) {
    journal = std::move(opened_journal).value();
  } else if (opened_journal.status().IsCorruption() && opts.rebuild_damaged_index && !opts.read_only &&
             !rados) {
    journal_damage = opened_journal.status().message();
  } else if (opened_journal.status().IsCorruption() && !rados) {
    return Status::Corruption(opened_journal.status().message() +
                              "; if the store's index is whole, lmcfs-fsck --repair " + dir +
                              " writes the journal again from it");
  } else {
    return opened_journal.status();
  }
  // The local directory, owner-only like a store directory.
  if (Status st = Env::Default()->CreateDir(local_dir); !st.ok()) {
    std::error_code ec;
    std::filesystem::create_directories(local_dir, ec);
    if (ec) return Status::IOError("creating the local index directory " + local_dir + ": " + ec.message());
    ::chmod(local_dir.c_str(), 0700);
  }
  // Missing column families are created only in a new local index: one
  // that lost them in its MANIFEST is damaged, not new.
  const bool local_exists = ::access((index_dir + "/CURRENT").c_str(), F_OK) == 0;
  // The journal holds every index change: a damaged index (or one that
  // differs from the journal) is moved aside, evidence for the user, and
  // made again.
  auto move_aside = [&](const std::string& why) -> Status {
    char ts[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(ts, sizeof ts, "%Y%m%dT%H%M%SZ", std::gmtime(&now));
    const std::string aside = index_dir + ".damaged-" + ts;
    spdlog::warn("store {}: {}; moving it to {} and rebuilding the index from the journal", dir, why, aside);
    std::error_code ec;
    std::filesystem::rename(index_dir, aside, ec);
    if (ec) return Status::IOError("moving the index " + index_dir + " aside: " + ec.message());
    rebuilt_index_aside = aside;
    open_repairs.push_back(why + "; the index was rebuilt from the store's journal (the old copy is in " +
                           aside + ": delete it once the store checks out)");
    return Status::Ok();
  };
  if (opts.rebuild_index && local_exists && journal && !opts.read_only)
    LMC_RETURN_IF_ERROR(move_aside("the index differed from its journal"));
  Status opened = OpenIndex(!local_exists || !rebuilt_index_aside.empty());
  if (!opened.ok() && opened.IsCorruption() && opts.rebuild_damaged_index && !opts.read_only && journal) {
    LMC_RETURN_IF_ERROR(move_aside("the index was damaged (" + opened.message() + ")"));
    opened = OpenIndex(true);
  }
  if (!opened.ok() && !journal)
    return Status::Corruption(journal_damage + "; and the index cannot be opened either (" +
                              opened.message() + "): restore the store from a copy");
  LMC_RETURN_IF_ERROR(opened);
  std::string id;
  const bool have_local = db->Get(rocksdb::ReadOptions(), handles[0], fmt::kJournalIdKey, &id).ok();
  uint64_t at = LocalJournalSeq();
  if (!journal) {
    if (!have_local)
      return Status::Corruption(journal_damage +
                                "; and there is no index to write it again from: restore the "
                                "store from a copy");
    LMC_ASSIGN_OR_RETURN(
        journal, IndexJournal::Recreate(env, dir, id, at,
                                        [&](const IndexJournal::SinkFn& sink) { return ScanIndex(sink); }));
    open_repairs.push_back(journal_damage +
                           "; the journal was written again from the index (a snapshot at record " +
                           std::to_string(at) + ")");
    return Status::Ok();
  }
  auto rebuild = [&](const std::string& why) -> Status {
    spdlog::info("store {}: rebuilding the local index {} from the journal ({})", dir, index_dir, why);
    CloseIndex();
    rocksdb::Options o;
    o.env = OwnerOnlyRocksEnv();
    LMC_RETURN_IF_ERROR(FromRocks(rocksdb::DestroyDB(index_dir, o), "removing the local index " + index_dir));
    LMC_RETURN_IF_ERROR(OpenIndex(true));
    rocksdb::WriteBatch wb;
    wb.Put(handles[0], fmt::kJournalIdKey, journal->id());
    LMC_RETURN_IF_ERROR(LoadSnapshotInto(*journal, db, handles, rocksdb::WriteOptions(), wb));
    uint8_t seq[8];
    StoreLE64(seq, journal->snapshot_seq());
    wb.Put(handles[0], fmt::kJournalSeqKey, rocksdb::Slice(reinterpret_cast<const char*>(seq), 8));
    LMC_RETURN_IF_ERROR(FromRocks(db->Write(rocksdb::WriteOptions(), &wb), "loading the index snapshot"));
    at = journal->snapshot_seq();
    return Status::Ok();
  };
  if (!have_local) {
    LMC_RETURN_IF_ERROR(rebuild(fresh ? "a new store" : "no local index on this node"));
  } else if (id != journal->id()) {
    LMC_RETURN_IF_ERROR(rebuild("the local index is of another store of the same name"));
  } else if (at < journal->snapshot_seq()) {
    LMC_RETURN_IF_ERROR(rebuild("the local index is older than the journal's snapshot"));
  }
  auto apply = [&](uint64_t, std::string_view data) -> Status {
    rocksdb::WriteBatch wb{std::string(data)};
    return FromRocks(db->Write(rocksdb::WriteOptions(), &wb), "applying the index journal");
  };
  uint64_t replayed = 0;
  const bool writable = !opts.read_only;
  Status st = journal->Replay(at, apply, &replayed, writable);
  if (st.code() == Code::kAborted) {
    LMC_RETURN_IF_ERROR(rebuild(st.message()));
    st = journal->Replay(at, apply, &replayed, writable);
  }
  LMC_RETURN_IF_ERROR(st);
  if (!writable) return Status::Ok();
  if (journal->damaged()) {
    // Rot in journal records the local index holds: nothing is lost, but
    // the journal could no longer rebuild the index; write it again.
    std::lock_guard l(journal_mu);
    LMC_RETURN_IF_ERROR(journal->Heal([&](const IndexJournal::SinkFn& sink) { return ScanIndex(sink); }));
    open_repairs.push_back(
        "journal records the index holds were damaged; the journal was written again from "
        "the index");
  }
  if (replayed > 0)
    spdlog::info("store {}: applied {} bytes of index journal to the local index (now at record {})", dir,
                 replayed, journal->next_seq() - 1);
  if (replayed >= opts.journal_snapshot_bytes && replayed > 0) {
    std::lock_guard l(journal_mu);
    if (Status ss = SnapshotIndex(); !ss.ok())
      spdlog::warn("store {}: index snapshot failed ({})", dir, ss.ToString());
  }
  return Status::Ok();
}

// The index as the journal makes it (its snapshot, then its records), in a
// scratch RocksDB beside the index, compared entry by entry with the index
// (journal_mu held: no index write meanwhile). One line per column family
// that differs. RocksDB can lose entries without an error (a MANIFEST whose
// last edit reads as a torn tail drops a flush); the journal, checked
// record by record, is then the truth.
Result<std::vector<std::string>> Store::Impl::CompareWithJournal() {
  // A follower's view of HEAD is of its open or of the last replay that
  // read it again: the writer may have written snapshots since, and
  // deleted the records they hold with their segments (compared with the
  // old snapshot, the index held entries "not in the journal").
  if (opts.read_only) LMC_RETURN_IF_ERROR(journal->Reload());
  const std::string tmp = index_dir + ".fsck-" + std::to_string(::getpid());
  rocksdb::Options o;
  o.env = OwnerOnlyRocksEnv();
  o.create_if_missing = true;
  o.create_missing_column_families = true;
  o.info_log = std::make_shared<RocksToSpdlog>();
  rocksdb::DestroyDB(tmp, o).PermitUncheckedError();
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  for (auto* h : handles) cfs.emplace_back(h->GetName(), rocksdb::ColumnFamilyOptions());
  std::vector<rocksdb::ColumnFamilyHandle*> th;
  rocksdb::DB* raw = nullptr;
  LMC_RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(o, tmp, cfs, &th, &raw), "opening a scratch index " + tmp));
  std::unique_ptr<rocksdb::DB> t(raw);
  struct Cleanup {
    std::unique_ptr<rocksdb::DB>& db;
    std::vector<rocksdb::ColumnFamilyHandle*>& h;
    const std::string& dir;
    rocksdb::Options& o;
    ~Cleanup() {
      for (auto* x : h) db->DestroyColumnFamilyHandle(x).PermitUncheckedError();
      db->Close().PermitUncheckedError();
      db.reset();
      rocksdb::DestroyDB(dir, o).PermitUncheckedError();
    }
  } cleanup{t, th, tmp, o};
  for (size_t i = 0; i < handles.size(); ++i) {
    // Records name column families by id: the scratch index must agree.
    if (th[i]->GetID() != handles[i]->GetID())
      return Status::Unsupported("index column family " + handles[i]->GetName() + " has id " +
                                 std::to_string(handles[i]->GetID()) + ", a new index " +
                                 std::to_string(th[i]->GetID()));
  }
  rocksdb::WriteOptions wo;
  wo.disableWAL = true;
  rocksdb::WriteBatch wb;
  LMC_RETURN_IF_ERROR(LoadSnapshotInto(*journal, t.get(), th, wo, wb));
  LMC_RETURN_IF_ERROR(FromRocks(t->Write(wo, &wb), "loading the index snapshot"));
  LMC_RETURN_IF_ERROR(journal->ForEachRecord([&](uint64_t, std::string_view data) -> Status {
    rocksdb::WriteBatch rec{std::string(data)};
    return FromRocks(t->Write(wo, &rec), "applying the index journal");
  }));
  std::vector<std::string> out;
  for (size_t i = 0; i < handles.size(); ++i) {
    std::unique_ptr<rocksdb::Iterator> a(db->NewIterator(rocksdb::ReadOptions(), handles[i]));
    std::unique_ptr<rocksdb::Iterator> b(t->NewIterator(rocksdb::ReadOptions(), th[i]));
    uint64_t missing = 0, extra = 0, other = 0;
    std::string first;
    auto note = [&](const rocksdb::Slice& k, const char* what) {
      if (first.empty()) first = std::string(what) + " key " + k.ToString(/*hex=*/true);
    };
    a->SeekToFirst();
    b->SeekToFirst();
    while (a->Valid() || b->Valid()) {
      // The journal's own id is written to the local index, not journaled
      // (a snapshot, which scans the index, may hold it).
      if (i == 0 && a->Valid() && a->key() == rocksdb::Slice(fmt::kJournalIdKey)) {
        a->Next();
        continue;
      }
      if (i == 0 && b->Valid() && b->key() == rocksdb::Slice(fmt::kJournalIdKey)) {
        b->Next();
        continue;
      }
      const int c = !a->Valid() ? 1 : !b->Valid() ? -1 : a->key().compare(b->key());
      if (c < 0) {
        ++extra;
        note(a->key(), "not in the journal:");
        a->Next();
      } else if (c > 0) {
        ++missing;
        note(b->key(), "missing from the index:");
        b->Next();
      } else {
        if (a->value() != b->value()) {
          ++other;
          note(a->key(), "another value:");
        }
        a->Next();
        b->Next();
      }
    }
    LMC_RETURN_IF_ERROR(FromRocks(a->status(), "reading the index"));
    LMC_RETURN_IF_ERROR(FromRocks(b->status(), "reading the scratch index"));
    if (missing + extra + other > 0)
      out.push_back("index column family " + handles[i]->GetName() +
                    " differs from the journal: " + std::to_string(missing) +
                    " entries missing from the index, " + std::to_string(extra) + " not in the journal, " +
                    std::to_string(other) + " with other values (first: " + first + ")");
  }
  return out;
}

Result<std::vector<std::string>> Store::CompareIndexWithJournal() {
  Impl& s = *impl_;
  if (!s.journal) return Status::Unsupported("store " + s.dir + " has no index journal");
  std::lock_guard l(s.journal_mu);
  return s.CompareWithJournal();
}

Status Store::Impl::ScanIndex(const IndexJournal::SinkFn& sink) {
  for (auto* h : handles) {
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), h));
    for (it->SeekToFirst(); it->Valid(); it->Next())
      LMC_RETURN_IF_ERROR(sink(h->GetID(), it->key().ToStringView(), it->value().ToStringView()));
    LMC_RETURN_IF_ERROR(FromRocks(it->status(), "reading the index for a snapshot"));
  }
  return Status::Ok();
}

Status Store::Impl::SnapshotIndex() {
  const uint64_t seq = LocalJournalSeq();
  return journal->WriteSnapshot(seq,
                                [&](const IndexJournal::SinkFn& sink) -> Status { return ScanIndex(sink); });
}

// ---------------------------------------------------------------- reads

Result<fmt::ChunkEntry> Store::Impl::LoadEntry(const ChunkKey& key) {
  std::string v;
  rocksdb::Status rs = db->Get(rocksdb::ReadOptions(), chunks_cf, key.view(), &v);
  if (rs.IsNotFound()) return Status::NotFound("no chunk " + key.ToHex());
  LMC_RETURN_IF_ERROR(FromRocks(rs, "reading chunk index"));
  auto e = fmt::DecodeChunkEntry(key, v);
  if (!e.ok() && e.status().IsCorruption()) {
    n_corruptions++;
    spdlog::error("store {}: chunk {}: index value: {}", dir, key.ToHex(), e.status().message());
    return Status::Corruption("chunk " + key.ToHex() + ": index value: " + e.status().message());
  }
  return e;
}

Result<std::shared_ptr<File>> Store::Impl::PackFile(uint64_t id) {
  {
    std::shared_lock l(files_mu);
    auto it = files.find(id);
    if (it != files.end()) return it->second;
    if (retired.count(id)) return Status::NotFound("pack " + std::to_string(id) + " retired");
  }
  LMC_ASSIGN_OR_RETURN(std::unique_ptr<File> f, env->OpenFile(PackPath(id), Env::OpenMode::kRead));
  std::unique_lock l(files_mu);
  if (retired.count(id)) return Status::NotFound("pack " + std::to_string(id) + " retired");
  auto [it, inserted] = files.emplace(id, std::shared_ptr<File>(std::move(f)));
  return it->second;
}

Status Store::Impl::CorruptionAt(const std::string& pack_path, const ChunkKey& key, uint64_t off,
                                 const std::string& what) {
  return Status::Corruption("chunk " + key.ToHex() + " in " + pack_path + " at offset " +
                            std::to_string(off) + ": " + what);
}

Status Store::Impl::Reported(Status st) {
  if (st.IsCorruption()) {
    n_corruptions++;
    spdlog::error("store: {}", st.message());
  }
  return st;
}

Status Store::Impl::Corrupt(const ChunkKey& key, uint64_t pack, uint64_t off, const std::string& what) {
  return Reported(CorruptionAt(PackPath(pack), key, off, what));
}

bool Store::Impl::Moved(const ChunkKey& key, const fmt::ChunkEntry& e) {
  if (opts.read_only && journal) {
    std::lock_guard l(journal_mu);
    auto n = ApplyJournal(
        [this](Cf cf, std::string_view k, KeyChange how) { caught_up_keys.emplace_back(cf, k, how); });
    if (n.ok()) {
      caught_up_records += *n;
    } else {
      spdlog::debug("store {}: catching up with the writer's journal for chunk {}: {}", dir, key.ToHex(),
                    n.status().ToString());
    }
  }
  auto now = LoadEntry(key);
  if (!now.ok()) return now.status().IsNotFound();
  return now->pack_id != e.pack_id || now->offset != e.offset;
}

Status Store::Impl::ReadRecord(const ChunkKey& key, const fmt::ChunkEntry& e, const File& f,
                               std::vector<uint8_t>& buf) {
  const size_t n = e.record_size();
  buf.resize(n);
  LMC_ASSIGN_OR_RETURN(size_t got, f.ReadAt(e.offset, n, buf.data()));
  if (got < n)
    return CorruptionAt(PackPath(e.pack_id), key, e.offset,
                        "record truncated: pack ends before the index says");
  return CheckRecord(key, e, buf.data());
}

Result<const uint8_t*> Store::Impl::ReadRecordForDecode(const ChunkKey& key, const fmt::ChunkEntry& e,
                                                        const File& f, std::vector<uint8_t>& buf) {
  constexpr size_t kDirectRecordBytes = size_t{64} << 10;
  const size_t n = e.record_size();
  const size_t align = n >= kDirectRecordBytes ? f.DirectReadAlign() : 0;
  if (align == 0) {
    LMC_RETURN_IF_ERROR(ReadRecord(key, e, f, buf));
    return buf.data();
  }
  const uint64_t first = e.offset & ~(uint64_t{align} - 1);
  const size_t skip = static_cast<size_t>(e.offset - first);
  const size_t len = (skip + n + align - 1) & ~(align - 1);
  // Its own buffer, grown and never shrunk (buf is sized to each record by
  // ReadRecord): no zero fill per read.
  thread_local std::vector<uint8_t> direct;
  if (direct.size() < len + align) direct.resize(len + align);
  const auto base = reinterpret_cast<uintptr_t>(direct.data());
  uint8_t* dst = direct.data() + (((base + align - 1) & ~(uintptr_t{align} - 1)) - base);
  LMC_ASSIGN_OR_RETURN(size_t got, f.ReadDirect(first, len, dst));
  if (got < skip + n)
    return CorruptionAt(PackPath(e.pack_id), key, e.offset,
                        "record truncated: pack ends before the index says");
  LMC_RETURN_IF_ERROR(CheckRecord(key, e, dst + skip));
  return dst + skip;
}

Status Store::Impl::CheckRecord(const ChunkKey& key, const fmt::ChunkEntry& e, const uint8_t* rec) {
  auto bad = [&](const std::string& what) { return CorruptionAt(PackPath(e.pack_id), key, e.offset, what); };
  auto h = fmt::ParseRecordHeader(rec);
  if (!h.ok()) return bad(h.status().message());
  if (h->key != key) return bad("record holds chunk " + h->key.ToHex());
  if (h->frame_len != e.frame_len || h->decoded_len != e.decoded_len)
    return bad("record lengths differ from the index");
  if (h->owner != e.owner) return bad("record key owner differs from the index");
  if (h->checksum != fmt::RecordChecksum(rec, rec + fmt::kRecordHeaderSize, e.frame_len))
    return bad("record checksum mismatch");
  return Status::Ok();
}

Result<size_t> Store::Impl::Read(const ChunkKey& key, uint8_t* dst, size_t cap, Workspace& ws,
                                 bool verify_hash, int depth) {
  if (depth > fmt::kMaxDeltaDepth)
    return Status::Corruption("chunk " + key.ToHex() + ": delta chain too deep");
  thread_local std::vector<uint8_t> record;
  for (int attempt = 0;; ++attempt) {
    LMC_ASSIGN_OR_RETURN(fmt::ChunkEntry e, LoadEntry(key));
    if (cap < e.decoded_len)
      return Status::InvalidArgument("buffer of " + std::to_string(cap) + " bytes for chunk " + key.ToHex() +
                                     " of " + std::to_string(e.decoded_len));
    // A chunk decoded earlier as a base (reverse deltas: reading an older
    // save decodes the newer ones, down to the keyframe) is served from the
    // base cache. Keys name content, and only verified bytes go in, so they
    // are the chunk's bytes; verify_hash still checks them.
    if (depth == 0 && base_cache) {
      if (ChunkBytes hit = base_cache->Get(key); hit && hit->size() == e.decoded_len) {
        n_base_hits++;
        std::memcpy(dst, hit->data(), hit->size());
        if (verify_hash && keys.Of(dst, hit->size(), e.owner) != key)
          return Corrupt(key, e.pack_id, e.offset, "cached bytes do not hash to the chunk key");
        return hit->size();
      }
    }
    ChunkBytes base;
    if (e.base) {
      // Decoded bases are cached: reading a series in order goes through
      // the same bases again. Only bytes that decoded and verified are put,
      // under their own key (a base may be of another size than the chunk:
      // the bf16 twin of an fp32 chunk).
      if (base_cache) base = base_cache->Get(*e.base);
      if (base) {
        n_base_hits++;
      } else {
        n_base_misses++;
        auto be = LoadEntry(*e.base);
        if (!be.ok() && attempt < 3 && Moved(key, e)) continue;
        if (!be.ok())
          return Corrupt(key, e.pack_id, e.offset,
                         "delta base " + e.base->ToHex() + " unreadable: " + be.status().ToString());
        uint8_t* w;
        ChunkBytes b = NewChunkBytes(be->decoded_len, &w);
        // The base's own key is not re-hashed: a wrong base makes this
        // chunk's decoded bytes fail their checks below (frame checksum,
        // and the key when verify_hash), and fsck verifies every base as a
        // chunk of its own.
        auto n = Read(*e.base, w, be->decoded_len, ws, false, depth + 1);
        // This chunk may have been rewritten onto another base meanwhile.
        if ((!n.ok() || *n != be->decoded_len) && attempt < 3 && Moved(key, e)) continue;
        if (!n.ok() || *n != be->decoded_len)
          return Corrupt(key, e.pack_id, e.offset,
                         "delta base " + e.base->ToHex() + " unreadable: " +
                             (n.ok() ? std::string("size differs") : n.status().ToString()));
        base = std::move(b);
        if (base_cache) base_cache->Put(*e.base, base);
      }
    }
    auto f = PackFile(e.pack_id);
    if (!f.ok()) {
      // Compaction may have moved the chunk and retired the pack after we
      // read the entry: read the entry again (a follower's after catching
      // up with the writer's journal: Moved).
      if (f.status().IsNotFound() && attempt < 3) {
        (void)Moved(key, e);
        continue;
      }
      if (f.status().IsNotFound()) return Corrupt(key, e.pack_id, e.offset, "pack file missing");
      return f.status();
    }
    auto rec = ReadRecordForDecode(key, e, **f, record);
    if (!rec.ok()) {
      // The record died (rebased, rewritten, moved, released) after we
      // read its entry, and its blocks may have been punched: read the
      // entry again. Only a record still in place that fails is corrupt.
      if (rec.status().IsCorruption() && attempt < 3 && Moved(key, e)) continue;
      return Reported(rec.status());
    }
    const uint8_t* frame = *rec + fmt::kRecordHeaderSize;
    auto n = CheckDecoded(key, e,
                          codec->Decode(frame, e.frame_len, base ? base->data() : nullptr,
                                        base ? base->size() : 0, dst, cap, ws),
                          dst, verify_hash);
    if (!n.ok()) return n.status();
    // A delta read directly is likely the base of the next save in a series
    // read in order (forward deltas): keep it. Not an fp32 master on its
    // bf16 twin: a master is a base only in forward mode, when its next
    // save's master found the lineage delta smaller than its own twin
    // (rare); the copy would cost every read of a paired file.
    if (depth == 0 && base_cache && e.base && !WidenedFrame(frame))
      base_cache->Put(key, CopyChunkBytes(dst, *n));
    if (depth == 0 && !e.base) KeepIfPairedBase(key, frame, dst, *n);
    return *n;
  }
}

bool Store::Impl::WidenedFrame(const uint8_t* frame) {
  auto kind = PeekFrame(frame, kFramePeekBytes);  // the frame was read and checked whole
  return kind.ok() && kind->widened_base;
}

void Store::Impl::KeepIfPairedBase(const ChunkKey& key, const uint8_t* frame, const uint8_t* dst, size_t n) {
  if (!base_cache) return;
  auto kind = PeekFrame(frame, kFramePeekBytes);  // the frame was read and checked whole
  if (!kind.ok() || kind->dtype != DType::kBF16 || !HasDependants(key)) return;
  base_cache->Put(key, CopyChunkBytes(dst, n));
}

Result<size_t> Store::Impl::CheckDecoded(const ChunkKey& key, const fmt::ChunkEntry& e,
                                         const Result<size_t>& n, const uint8_t* dst, bool verify_hash) {
  if (!n.ok()) {
    if (n.status().code() == Code::kUnsupported) return n.status();
    return Corrupt(key, e.pack_id, e.offset, "frame: " + n.status().message());
  }
  if (*n != e.decoded_len) return Corrupt(key, e.pack_id, e.offset, "frame decodes to another size");
  if (verify_hash && keys.Of(dst, *n, e.owner) != key)
    return Corrupt(key, e.pack_id, e.offset, "decoded bytes do not hash to the chunk key");
  return *n;
}

Result<ChunkMatch> Store::MatchChunk(const ChunkKey& key, const uint8_t* p, size_t n, Workspace& ws) {
  Impl& s = *impl_;
  ChunkMatch m;
  auto e = s.LoadEntry(key);
  if (!e.ok()) {
    if (e.status().IsNotFound()) return m;
    return e.status();
  }
  // The record as the entry named it before the read: if the chunk moves
  // meanwhile, the commit finds another record and compares again.
  m.pack_id = e->pack_id;
  m.offset = e->offset;
  m.frame_len = e->frame_len;
  if (e->decoded_len != n) {
    m.kind = ChunkMatch::Kind::kDiffers;
    return m;
  }
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < n) buf.resize(n);
  auto r = s.Read(key, buf.data(), n, ws, false, 0);
  if (!r.ok()) {
    if (r.status().IsNotFound()) return ChunkMatch{};
    return r.status();
  }
  m.kind =
      *r == n && std::memcmp(buf.data(), p, n) == 0 ? ChunkMatch::Kind::kEqual : ChunkMatch::Kind::kDiffers;
  return m;
}

Result<size_t> Store::ReadChunk(const ChunkKey& key, uint8_t* dst, size_t cap, Workspace& ws) {
  return impl_->Read(key, dst, cap, ws, impl_->opts.verify_content_hash, 0);
}

Result<ChunkInfo> Store::GetChunkInfo(const ChunkKey& key) {
  LMC_ASSIGN_OR_RETURN(fmt::ChunkEntry e, impl_->LoadEntry(key));
  ChunkInfo i;
  i.pack_id = e.pack_id;
  i.offset = e.offset;
  i.frame_len = e.frame_len;
  i.decoded_len = e.decoded_len;
  i.refcount = e.refcount;
  i.delta_depth = e.depth;
  i.base = e.base;
  return i;
}

Result<std::string> Store::Get(Cf cf, std::string_view key) {
  std::string v;
  rocksdb::Status rs = impl_->db->Get(rocksdb::ReadOptions(), impl_->fs_cf[static_cast<size_t>(cf)],
                                      rocksdb::Slice(key.data(), key.size()), &v);
  if (rs.IsNotFound()) return Status::NotFound("no such key");
  LMC_RETURN_IF_ERROR(FromRocks(rs, "reading index"));
  return v;
}

Status Store::Scan(Cf cf, std::string_view prefix,
                   const std::function<bool(std::string_view, std::string_view)>& fn) {
  std::unique_ptr<rocksdb::Iterator> it(
      impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->fs_cf[static_cast<size_t>(cf)]));
  std::string kk, vk;  // copies under ThreadSanitizer (rocks_view.h)
  for (it->Seek(rocksdb::Slice(prefix.data(), prefix.size())); it->Valid(); it->Next()) {
    std::string_view k = View(it->key(), &kk);
    if (k.substr(0, prefix.size()) != prefix) break;
    if (!fn(k, View(it->value(), &vk))) break;
  }
  return FromRocks(it->status(), "scanning index");
}

Status Store::PinChunk(const ChunkKey& key) {
  Impl& s = *impl_;
  {
    std::lock_guard l(s.pin_mu);
    auto it = s.pins.find(key);
    // Pinned already: the chunk is indexed (a pinned chunk is never dropped).
    if (it != s.pins.end()) {
      it->second++;
      return Status::Ok();
    }
  }
  // First pin: check presence with commits excluded, so that no commit
  // group between the check and the pin can drop the chunk.
  std::lock_guard cl(s.commit_mu);
  LMC_ASSIGN_OR_RETURN(fmt::ChunkEntry e, s.LoadEntry(key));
  (void)e;
  std::lock_guard l(s.pin_mu);
  s.pins[key]++;
  return Status::Ok();
}

Result<bool> Store::DerivedFromTwin(const ChunkKey& key) {
  Impl& s = *impl_;
  for (int attempt = 0;; ++attempt) {
    LMC_ASSIGN_OR_RETURN(fmt::ChunkEntry e, s.LoadEntry(key));
    if (!e.base) return false;
    auto f = s.PackFile(e.pack_id);
    if (!f.ok()) {
      if (f.status().IsNotFound() && attempt < 3) continue;  // moved by compaction: look again
      return f.status();
    }
    uint8_t head[kFramePeekBytes];
    LMC_ASSIGN_OR_RETURN(size_t n, (*f)->ReadAt(e.offset + fmt::kRecordHeaderSize, sizeof head, head));
    auto kind = PeekFrame(head, n);
    if (!kind.ok() && attempt < 3 && s.Moved(key, e)) continue;  // rewritten (and punched) meanwhile
    if (!kind.ok()) return s.Corrupt(key, e.pack_id, e.offset, kind.status().message());
    return kind->widened_base;
  }
}

static_assert(Store::kMaxDeltaChain == fmt::kMaxDeltaDepth);

void Store::PinPendingChunk(const ChunkKey& key) {
  std::lock_guard l(impl_->pin_mu);
  impl_->pins[key]++;
}

void Store::UnpinChunk(const ChunkKey& key) {
  Impl& s = *impl_;
  std::lock_guard l(s.pin_mu);
  auto it = s.pins.find(key);
  if (it == s.pins.end()) return;
  if (--it->second == 0) {
    s.pins.erase(it);
    if (s.pinned_dead.count(key)) s.reap.insert(key);
  }
}

uint64_t Store::PinnedDeadChunks() const {
  std::lock_guard l(impl_->pin_mu);
  return impl_->pinned_dead.size();
}

Result<Store::DiskUsage> Store::GetDiskUsage() const {
  Impl& s = *impl_;
  DiskUsage u;
  LMC_ASSIGN_OR_RETURN(u.total, s.env->DiskBytes(s.dir));
  if (s.opts.journal) {
    LMC_ASSIGN_OR_RETURN(u.index, Env::Default()->DiskBytes(s.index_dir));
    LMC_ASSIGN_OR_RETURN(uint64_t journal, s.env->DiskBytes(s.dir + "/journal"));
    u.index += journal;
    u.total += u.index - journal;
  } else {
    LMC_ASSIGN_OR_RETURN(u.index, s.env->DiskBytes(s.index_dir));
  }
  LMC_ASSIGN_OR_RETURN(u.packs, s.env->DiskBytes(s.pack_dir));
  return u;
}

Result<Store::DiskUsage> Store::KnownDiskUsage() const {
  Impl& s = *impl_;
  if (!IsRadosSpec(s.dir) || !s.journal) return GetDiskUsage();
  DiskUsage u;
  u.packs = Stats().pack_disk_bytes;  // holes cached: no round trip (cache_holes)
  LMC_ASSIGN_OR_RETURN(u.index, Env::Default()->DiskBytes(s.index_dir));
  u.index += s.journal->snapshot_bytes() + s.journal->bytes_since_snapshot();
  u.total = u.packs + u.index;
  return u;
}

int Store::BackingSpace(struct statvfs* out) const {
  const Impl& s = *impl_;
  if (s.rados) {
    *out = {};
    out->f_bsize = out->f_frsize = 4096;
    out->f_namemax = 255;
    auto space = s.rados->Space();
    if (space.status().IsNotFound()) {
      // Unknown space is shown as none (df: 0 blocks), said once.
      if (!s.space_unknown_said.exchange(true))
        spdlog::warn("store {}: {}; df on the mount shows 0 blocks until it does", s.dir,
                     space.status().ToString());
      return 0;
    }
    if (!space.ok()) {
      // Said once per spell: a monitoring agent may call statfs every second
      // while the monitors are away (a failed answer is also cached 5 s).
      if (!s.space_failing.exchange(true))
        spdlog::warn("store {}: {}; statfs on the mount fails (EIO) until the monitors answer", s.dir,
                     space.status().ToString());
      return EIO;
    }
    if (s.space_failing.exchange(false))
      spdlog::info("store {}: the monitors answer again; df shows the pool's space", s.dir);
    out->f_blocks = space->total / 4096;
    out->f_bfree = out->f_bavail = space->avail / 4096;
    return 0;
  }
  const std::string& where = IsRadosSpec(s.dir) ? s.local_dir : s.dir;
  return ::statvfs(where.c_str(), out) == 0 ? 0 : errno;
}

const std::string& Store::Name() const { return impl_->dir; }
bool Store::ReadOnly() const { return impl_->opts.read_only; }
const KeyScheme& Store::keys() const { return impl_->keys; }

namespace {

// The filesystem's keys in a journal record (Store::Refresh's on_key).
// Before the record is applied, Remember notes what each extent it puts
// replaces (the first Extent::kEncodedSize bytes), so that a put changing
// only the trailer is told as such.
class FsKeysOf : public rocksdb::WriteBatch::Handler {
 public:
  FsKeysOf(const std::array<rocksdb::ColumnFamilyHandle*, 4>& cfs, const Store::RefreshKeyFn& fn) : fn_(fn) {
    for (size_t i = 0; i < cfs.size(); ++i) ids_[i] = cfs[i] ? cfs[i]->GetID() : UINT32_MAX;
    extents_ = cfs[static_cast<size_t>(Cf::kExtents)];
  }
  // The extents' values the record replaces, read from db (before it is
  // applied). A key the record puts twice counts as changed.
  rocksdb::Status Remember(rocksdb::DB* db, const rocksdb::WriteBatch& wb) {
    if (!extents_) return rocksdb::Status::OK();
    struct Puts : rocksdb::WriteBatch::Handler {
      uint32_t id;
      std::vector<std::string> keys;
      rocksdb::Status PutCF(uint32_t cf, const rocksdb::Slice& key, const rocksdb::Slice&) override {
        if (cf == id) keys.push_back(key.ToString());
        return rocksdb::Status::OK();
      }
      // The rest passes (the Handler's defaults refuse other column families).
      rocksdb::Status DeleteCF(uint32_t, const rocksdb::Slice&) override { return rocksdb::Status::OK(); }
      rocksdb::Status SingleDeleteCF(uint32_t, const rocksdb::Slice&) override {
        return rocksdb::Status::OK();
      }
      rocksdb::Status DeleteRangeCF(uint32_t, const rocksdb::Slice&, const rocksdb::Slice&) override {
        return rocksdb::Status::OK();
      }
      rocksdb::Status MergeCF(uint32_t, const rocksdb::Slice&, const rocksdb::Slice&) override {
        return rocksdb::Status::OK();
      }
      void LogData(const rocksdb::Slice&) override {}
    } puts;
    puts.id = extents_->GetID();
    rocksdb::Status st = wb.Iterate(&puts);
    if (!st.ok()) return st;
    for (std::string& k : puts.keys) {
      std::string v;
      st = db->Get(rocksdb::ReadOptions(), extents_, k, &v);
      if (st.IsNotFound()) continue;
      if (!st.ok()) return st;
      if (v.size() < Extent::kEncodedSize) continue;
      v.resize(Extent::kEncodedSize);
      auto [it, fresh] = before_.try_emplace(std::move(k), std::move(v));
      if (!fresh) it->second.clear();  // put twice: changed
    }
    return rocksdb::Status::OK();
  }
  rocksdb::Status PutCF(uint32_t cf, const rocksdb::Slice& key, const rocksdb::Slice& value) override {
    Store::KeyChange how = Store::KeyChange::kChanged;
    if (extents_ && cf == extents_->GetID() && value.size() >= Extent::kEncodedSize) {
      auto it = before_.find(key.ToStringView());
      if (it != before_.end() && !it->second.empty() &&
          std::memcmp(it->second.data(), value.data(), Extent::kEncodedSize) == 0)
        how = Store::KeyChange::kTrailerOnly;
    }
    Tell(cf, key, how);
    return rocksdb::Status::OK();
  }
  rocksdb::Status DeleteCF(uint32_t cf, const rocksdb::Slice& key) override {
    Tell(cf, key);
    return rocksdb::Status::OK();
  }
  rocksdb::Status SingleDeleteCF(uint32_t cf, const rocksdb::Slice& key) override {
    Tell(cf, key);
    return rocksdb::Status::OK();
  }
  rocksdb::Status DeleteRangeCF(uint32_t cf, const rocksdb::Slice& begin, const rocksdb::Slice&) override {
    Tell(cf, begin);
    return rocksdb::Status::OK();
  }
  rocksdb::Status MergeCF(uint32_t cf, const rocksdb::Slice& key, const rocksdb::Slice&) override {
    Tell(cf, key);
    return rocksdb::Status::OK();
  }
  void LogData(const rocksdb::Slice&) override {}

 private:
  void Tell(uint32_t cf, const rocksdb::Slice& key, Store::KeyChange how = Store::KeyChange::kChanged) {
    for (size_t i = 0; i < ids_.size(); ++i)
      if (ids_[i] == cf) fn_(static_cast<Cf>(i), key.ToStringView(), how);
  }
  const Store::RefreshKeyFn& fn_;
  std::array<uint32_t, 4> ids_{};
  rocksdb::ColumnFamilyHandle* extents_ = nullptr;
  std::map<std::string, std::string, std::less<>> before_;  // extent key -> its first 48 bytes ("": changed)
};

// Writes wb (`what`, for errors) to the local index; on_key, if set, hears
// of its filesystem keys.
Status WriteTelling(rocksdb::DB* db, const std::array<rocksdb::ColumnFamilyHandle*, 4>& fs_cf,
                    rocksdb::WriteBatch& wb, const Store::RefreshKeyFn& on_key, const std::string& what) {
  std::optional<FsKeysOf> keys;
  if (on_key) {
    keys.emplace(fs_cf, on_key);
    LMC_RETURN_IF_ERROR(FromRocks(keys->Remember(db, wb), "reading what " + what + " replaces"));
  }
  LMC_RETURN_IF_ERROR(FromRocks(db->Write(rocksdb::WriteOptions(), &wb), "applying " + what));
  if (keys) LMC_RETURN_IF_ERROR(FromRocks(wb.Iterate(&*keys), "reading " + what + " once applied"));
  return Status::Ok();
}

}  // namespace

Result<uint64_t> Store::Impl::CatchUpWithSnapshot(const RefreshKeyFn& on_key) {
  std::unordered_map<uint32_t, rocksdb::ColumnFamilyHandle*> by_id;
  for (auto* h : handles) by_id[h->GetID()] = h;
  // The snapshot lists a column family at a time, each in key order
  // (ScanIndex); the local index is read alongside, as it was before this
  // write (no other writer: journal_mu).
  rocksdb::WriteBatch wb;
  uint64_t changed = 0;
  const rocksdb::Snapshot* view = db->GetSnapshot();
  rocksdb::ReadOptions ro;
  ro.snapshot = view;
  std::set<uint32_t> seen;
  rocksdb::ColumnFamilyHandle* cur = nullptr;
  std::unique_ptr<rocksdb::Iterator> it;
  std::string last;
  const auto start = [&](rocksdb::ColumnFamilyHandle* h) {
    cur = h;
    seen.insert(h->GetID());
    it.reset(db->NewIterator(ro, h));
    it->SeekToFirst();
  };
  // The local entries of `cur` from the iterator's on are not in the
  // snapshot.
  const auto drop_rest = [&]() -> Status {
    for (; it->Valid(); it->Next()) {
      wb.Delete(cur, it->key());
      changed++;
    }
    return FromRocks(it->status(), "reading the local index");
  };
  Status st = journal->LoadSnapshot([&](uint32_t cf, std::string_view k, std::string_view v) -> Status {
    const rocksdb::Slice key(k.data(), k.size()), value(v.data(), v.size());
    if (!cur || cur->GetID() != cf) {
      if (cur) LMC_RETURN_IF_ERROR(drop_rest());
      auto h = by_id.find(cf);
      if (h == by_id.end())
        return Status::Corruption("index snapshot names column family " + std::to_string(cf));
      if (seen.count(cf))
        return Status::Corruption("index snapshot lists column family " + std::to_string(cf) + " twice");
      start(h->second);
    } else if (cur->GetComparator()->Compare(key, last) <= 0) {
      return Status::Corruption("index snapshot's keys of column family " + std::to_string(cf) +
                                " are out of order");
    }
    const rocksdb::Comparator* cmp = cur->GetComparator();
    for (; it->Valid() && cmp->Compare(it->key(), key) < 0; it->Next()) {
      wb.Delete(cur, it->key());
      changed++;
    }
    if (it->Valid() && cmp->Compare(it->key(), key) == 0) {
      if (it->value() != value) {
        wb.Put(cur, key, value);
        changed++;
      }
      it->Next();
    } else {
      wb.Put(cur, key, value);
      changed++;
    }
    last.assign(k);
    return FromRocks(it->status(), "reading the local index");
  });
  if (st.ok() && cur) st = drop_rest();
  // A column family the snapshot does not list is empty in it.
  for (auto* h : handles) {
    if (!st.ok() || seen.count(h->GetID())) continue;
    start(h);
    st = drop_rest();
  }
  it.reset();
  db->ReleaseSnapshot(view);
  LMC_RETURN_IF_ERROR(st);
  wb.Put(handles[0], fmt::kJournalIdKey, journal->id());
  uint8_t seq[8];
  StoreLE64(seq, journal->snapshot_seq());
  wb.Put(handles[0], fmt::kJournalSeqKey, rocksdb::Slice(reinterpret_cast<const char*>(seq), 8));
  LMC_RETURN_IF_ERROR(WriteTelling(db, fs_cf, wb, on_key, "the index snapshot"));
  return changed;
}

Result<uint64_t> Store::Impl::ApplyJournal(const RefreshKeyFn& on_key) {
  uint64_t bytes = 0;
  uint64_t applied = 0;
  const auto apply = [&](uint64_t, std::string_view data) -> Status {
    rocksdb::WriteBatch wb{std::string(data)};
    applied++;
    return WriteTelling(db, fs_cf, wb, on_key, "a journal record");
  };
  Status st = journal->Replay(LocalJournalSeq(), apply, &bytes, /*writable=*/false);
  if (st.code() == Code::kAborted) {
    // The writer's snapshot took records this reader had not read (it was
    // slow, or away), or its segment was written again: the snapshot is
    // the index at its record, and the records after it follow. A snapshot
    // part that fails to read was most likely deleted by the writer's next
    // snapshot meanwhile: HEAD is read again and the catch-up tried again.
    const std::string why = st.message();
    Result<uint64_t> caught = Status::Aborted("not tried");
    for (int attempt = 0; attempt < 3; ++attempt) {
      LMC_RETURN_IF_ERROR(journal->Reload());
      caught = CatchUpWithSnapshot(on_key);
      if (caught.ok() || !(caught.status().IsNotFound() || caught.status().IsCorruption())) break;
    }
    if (!caught.ok()) {
      const std::string m = "store " + dir + ": this follower fell behind the writer's index (" + why +
                            ") and could not catch up from its snapshot: " + caught.status().ToString();
      // A snapshot that fails its checks three times is damaged; any other
      // failure (the cluster out of reach, the local index) is an I/O error.
      return caught.status().IsNotFound() || caught.status().IsCorruption() ? Status::Corruption(m)
                                                                            : Status::IOError(m);
    }
    spdlog::info(
        "store {}: this follower fell behind the writer's index ({}); caught up from its snapshot at "
        "journal record {} ({} entries changed)",
        dir, why, journal->snapshot_seq(), *caught);
    if (*caught > 0) applied++;
    st = journal->Replay(LocalJournalSeq(), apply, &bytes, /*writable=*/false);
  }
  LMC_RETURN_IF_ERROR(st);
  if (applied > 0) {
    // The packs as the writer's index has them now: new ones it started,
    // sizes and live bytes its commits changed, and none it retired or
    // deleted (compaction), as Recover reads them at open.
    std::lock_guard cl(commit_mu);
    std::map<uint64_t, fmt::PackMeta> now;
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), packs_cf));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      auto id = fmt::ParsePackKey(it->key().ToStringView());
      if (!id) continue;
      auto m = fmt::DecodePackMeta(*id, it->value().ToStringView());
      if (m.ok() && m->state != fmt::PackState::kRetired) now.emplace(*id, *m);
    }
    LMC_RETURN_IF_ERROR(FromRocks(it->status(), "reading the pack index"));
    std::vector<uint64_t> changed, gone;
    for (const auto& [id, m] : now) {
      auto was = packs.find(id);
      if (was == packs.end() || was->second.size != m.size || was->second.live != m.live)
        changed.push_back(id);
    }
    for (const auto& [id, m] : packs)
      if (!now.count(id)) gone.push_back(id);
    packs = std::move(now);
    PacksChanged(changed, gone);
  }
  return applied;
}

Result<uint64_t> Store::Refresh(const RefreshKeyFn& on_key) {
  Impl& s = *impl_;
  if (!s.opts.read_only || !s.journal)
    return Status::InvalidArgument("store " + s.dir + ": Refresh is for read-only journaled stores");
  std::lock_guard l(s.journal_mu);
  // What reads applied since the last call (Impl::Moved) is this call's too.
  const uint64_t caught_up = std::exchange(s.caught_up_records, 0);
  for (const auto& [cf, key, how] : std::exchange(s.caught_up_keys, {}))
    if (on_key) on_key(cf, key, how);
  LMC_ASSIGN_OR_RETURN(uint64_t applied, s.ApplyJournal(on_key));
  return caught_up + applied;
}

Result<std::unique_ptr<FileLock>> Store::WatchChanges(std::function<void()> fn) {
  Impl& s = *impl_;
  if (!s.rados) return Status::Unsupported("store " + s.dir + " is not in RADOS: nothing to watch");
  return s.rados->Watch(s.dir + "/journal/HEAD", std::move(fn));
}
const std::string& Store::LocalDir() const { return impl_->local_dir; }
const std::string& Store::RebuiltIndex() const { return impl_->rebuilt_index_aside; }
const std::vector<std::string>& Store::OpenRepairs() const { return impl_->open_repairs; }

StoreStats Store::Stats() const {
  Impl& s = *impl_;
  StoreStats st;
  uint64_t pack_disk_cached = 0;
  {
    std::lock_guard l(s.commit_mu);
    for (const auto& [id, m] : s.packs) {
      st.packs++;
      st.pack_bytes += m.size;
      st.live_bytes += m.live;
      if (m.live == 0 && !(s.active && id == s.active_id)) st.empty_packs++;
      // No round trip: a pack whose holes are not cached yet counts whole
      // until compaction's first look at it reads them.
      if (s.cache_holes) pack_disk_cached += s.PackOnDisk(id, m.size, false);
    }
  }
  st.commits = s.n_commits;
  st.commit_groups = s.n_groups;
  st.chunks_stored = s.n_stored;
  st.dedup_hits = s.n_dedup;
  st.dedup_verified = s.n_dedup_verified;
  st.encoded_at_commit = s.n_encoded_at_commit;
  st.bytes_appended = s.n_appended;
  st.corruptions = s.n_corruptions;
  st.base_cache_hits = s.n_base_hits;
  st.base_cache_misses = s.n_base_misses;
  st.rebased = s.n_rebased;
  st.rebase_skipped = s.n_rebase_skipped;
  st.pack_bytes_written = s.n_pack_written;
  st.compact_bytes_copied = s.n_compact_copied;
  st.compact_bytes_reclaimed = s.n_compact_reclaimed;
  st.punched_bytes = s.n_punched;
  st.punched_holes = s.n_holes;
  st.pack_disk_bytes = st.pack_bytes;
  if ((s.punch_enabled || s.follow_holes) && s.cache_holes) {
    st.pack_disk_bytes = pack_disk_cached;
  } else if (s.punch_enabled) {
    if (auto d = s.env->DiskBytes(s.pack_dir); d.ok()) st.pack_disk_bytes = *d;
  }
  if (s.base_cache) {
    st.base_cache_bytes = s.base_cache->bytes();
    st.base_cache_capacity = s.base_cache->capacity();
  }
  if (s.db) {
    uint64_t v = 0;
    if (s.db->GetAggregatedIntProperty(rocksdb::DB::Properties::kCurSizeAllMemTables, &v))
      st.index_memtable_bytes = v;
    if (s.db->GetAggregatedIntProperty(rocksdb::DB::Properties::kEstimateTableReadersMem, &v))
      st.index_table_reader_bytes = v;
  }
  for (const auto& c : {s.chunk_blocks, s.meta_blocks}) {
    if (!c) continue;
    st.index_block_cache_bytes += c->GetUsage();
    st.index_block_cache_capacity += c->GetCapacity();
  }
  if (s.rocks_stats) {
    st.index_bytes_written = s.rocks_stats->getTickerCount(rocksdb::WAL_FILE_BYTES) +
                             s.rocks_stats->getTickerCount(rocksdb::FLUSH_WRITE_BYTES) +
                             s.rocks_stats->getTickerCount(rocksdb::COMPACT_WRITE_BYTES);
  }
  return st;
}

std::string VersionText(std::string_view name) {
  return std::string(name) + " (lmcfs) " LMC_VERSION "\nformats: store " +
         std::to_string(fmt::kFormatVersionFirst) + "-" + std::to_string(fmt::kFormatVersion) + ", " +
         CodecFormats();
}

}  // namespace lmc::store
