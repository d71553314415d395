// The control channel (server and client) and the operations it serves:
// gc, fsck and stat as JSON documents (lmc/fs/control.h; protocol in
// docs/FORMAT.md, "Control protocol").
#include "lmc/fs/control.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include "lmc/bytes.h"
#include "lmc/fs/inspect.h"
#include "lmc/fs/trim.h"
#include "lmc/hash.h"
#include "lmc/store/chunk_key.h"
#include "lmc/store/frame_pool.h"
#include "lmc/store/rados.h"
#include "lmc/text.h"

namespace lmc::fs::control {

namespace {
// A copy of j with every string, and every object key, made valid UTF-8.
nlohmann::json Escaped(const nlohmann::json& j) {
  if (j.is_string()) return EscapeBytes(j.get_ref<const std::string&>());
  if (j.is_array()) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& e : j) a.push_back(Escaped(e));
    return a;
  }
  if (j.is_object()) {
    nlohmann::json o = nlohmann::json::object();
    for (const auto& [k, v] : j.items()) o[EscapeBytes(k)] = Escaped(v);
    return o;
  }
  return j;
}
}  // namespace

std::string DumpJson(const nlohmann::json& j, int indent) {
  try {
    return j.dump(indent);
  } catch (const nlohmann::json::type_error&) {  // 316: a string that is not UTF-8
    return Escaped(j).dump(indent);
  }
}

namespace {
std::string HexOfBytes(std::string_view s) {
  return store::HexOf(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}
}  // namespace

nlohmann::json NameToJson(const std::string& name) {
  if (IsValidUtf8(name)) return name;
  return nlohmann::json{{"hex", HexOfBytes(name)}};
}

Result<std::string> NameFromJson(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.size() == 1 && j.contains("hex") && j["hex"].is_string()) {
    const std::string& h = j["hex"].get_ref<const std::string&>();
    std::string b(h.size() / 2, '\0');
    if (h.size() % 2 == 0 && store::ParseHex(h, reinterpret_cast<uint8_t*>(b.data()), b.size())) return b;
    return Status::InvalidArgument("a name's \"hex\" is not hex digits, two a byte: " +
                                   EscapeBytes(h.substr(0, 64), true));
  }
  return Status::InvalidArgument("a name must be a string or {\"hex\": \"...\"}, not " +
                                 EscapeBytes(j.dump().substr(0, 64), true));
}

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ------------------------------------------------------------ framing

bool WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = ::recv(fd, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// A frame: u32 little-endian length, then that many bytes of JSON.
bool WriteFrame(int fd, const std::string& s) {
  uint8_t h[4];
  const uint32_t n = static_cast<uint32_t>(s.size());
  StoreLE32(h, n);
  return WriteAll(fd, h, 4) && WriteAll(fd, s.data(), s.size());
}

Status ReadFrame(int fd, std::string* s) {
  uint8_t h[4];
  if (!ReadAll(fd, h, 4)) return Status::IOError("control channel closed");
  const uint32_t n = LoadLE32(h);
  if (n > kMaxMessageBytes)
    return Status::Corruption("control message of " + std::to_string(n) + " bytes exceeds the limit");
  s->resize(n);
  if (!ReadAll(fd, s->data(), n)) return Status::IOError("control channel closed mid-message");
  return Status::Ok();
}

// sun_path holds 108 bytes; a longer path goes through the directory's
// /proc/self/fd entry (dir_fd keeps it open until the call is done).
Status Address(const std::string& path, sockaddr_un* a, int* dir_fd) {
  std::memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  *dir_fd = -1;
  std::string p = path;
  if (p.size() >= sizeof a->sun_path) {
    const auto slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
    *dir_fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (*dir_fd < 0) return Status::FromErrno(errno, "open " + dir);
    p = "/proc/self/fd/" + std::to_string(*dir_fd) + "/" + path.substr(slash + 1);
    if (p.size() >= sizeof a->sun_path) return Status::InvalidArgument("socket name too long: " + path);
  }
  std::memcpy(a->sun_path, p.c_str(), p.size());
  return Status::Ok();
}

json Figures(const SpaceFigures& f) {
  return {{"files", f.files},
          {"chunks", f.chunks},
          {"logical", f.logical},
          {"stored", f.stored},
          {"charged", f.charged},
          {"delta_stored", f.delta_stored},
          {"derived_stored", f.derived_stored},
          {"saved_derived", f.saved_derived},
          {"saved_codec", f.saved_codec},
          {"saved_delta", f.saved_delta},
          {"saved_dedup", f.saved_dedup},
          {"ratio", f.Ratio()}};
}

const char* TypeName(uint32_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "file";
    case S_IFDIR:
      return "dir";
    case S_IFLNK:
      return "symlink";
    default:
      return "special";
  }
}

// The chunks the store's problems name (each problem's chunk and its delta
// base): the candidates fsck then confirms bad one by one.
std::set<store::ChunkKey> ChunksNamed(const store::FsckReport& r) {
  std::set<store::ChunkKey> keys;
  for (const auto& p : r.problems) {
    if (p.key) keys.insert(*p.key);
    if (p.base) keys.insert(*p.base);
  }
  return keys;
}

// Writes `text` to `path` so that a crash leaves either no report or the
// whole of it: a temporary file beside it, synced, renamed over `path`, the
// directory synced. A failed step is an error naming `path` and the step.
Status WriteQuarantineReport(store::Env* env, const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  auto failed = [&](const std::string& step, const Status& st) {
    const std::string m = "cannot write the quarantine report " + path + ": " + step + ": " + st.message();
    return st.IsNoSpace() ? Status::NoSpace(m) : Status::IOError(m);
  };
  if (env->FileExists(tmp))  // left by a crash
    if (Status st = env->DeleteFile(tmp); !st.ok()) return failed("removing " + tmp, st);
  {
    auto f = env->OpenFile(tmp, store::Env::OpenMode::kCreate);
    if (!f.ok()) return failed("creating " + tmp, f.status());
    std::string step = "writing " + tmp;
    Status st = (*f)->Append(reinterpret_cast<const uint8_t*>(text.data()), text.size());
    if (st.ok()) {
      step = "syncing " + tmp;
      st = (*f)->Sync();
    }
    if (!st.ok()) {
      f->reset();
      env->DeleteFile(tmp).IgnoreError();  // the error below is what matters
      return failed(step, st);
    }
  }
  if (Status st = env->RenameFile(tmp, path); !st.ok()) {
    env->DeleteFile(tmp).IgnoreError();
    return failed("renaming " + tmp + " over it", st);
  }
  if (Status st = env->SyncDir(dir); !st.ok()) return failed("syncing directory " + dir, st);
  return Status::Ok();
}

}  // namespace

// A RADOS store's socket is in its default local directory (LocalDirOf),
// whatever local_dir the mount uses, so that tools find it by the store's
// name alone.
std::string SocketPath(const std::string& store_dir) {
  return store::LocalDirOf(store_dir) + "/" + kSocketName;
}

std::string FollowerSocketPath(const std::string& store, const std::string& mountpoint) {
  char name[40];
  std::snprintf(name, sizeof name, "control-%016llx.sock",
                static_cast<unsigned long long>(hash::Xxh3_64(mountpoint.data(), mountpoint.size())));
  return store::LocalDirOf(store) + "/" + name;
}

// ------------------------------------------------------------ operations

Result<std::string> RunGc(store::Store& st, const GcOptions& o, const EventFn& events) {
  const auto t0 = Clock::now();
  const store::StoreStats before = st.Stats();
  if (o.before_compact && !o.dry_run) LMC_RETURN_IF_ERROR(o.before_compact(st, events));
  store::CompactOptions co;
  co.live_fraction_threshold = o.threshold;
  co.max_bytes_to_copy = o.max_bytes;
  co.dry_run = o.dry_run;
  // An explicit gc reclaims what it can: the active pack too, once it holds
  // dead records (found by scripts/crash_run.py: they stayed after
  // `lmcfs-gc --threshold 1` of a mounted store).
  co.seal_active_dead_bytes = 1;
  // The rate limit sleeps between packs so that bytes copied / time stays
  // under the rate: commits wait only while one pack is copied.
  auto progress = [&](const store::CompactProgress& p) {
    if (events) {
      json e = {{"event", "progress"},
                {"op", "gc"},
                {"done", p.packs_done},
                {"total", p.packs_total},
                {"bytes_copied", p.bytes_copied},
                {"bytes_reclaimed", p.bytes_reclaimed},
                {"pack", p.pack_id}};
      events(DumpJson(e));
    }
    if (o.rate_bytes_per_s > 0) {
      const double want = static_cast<double>(p.bytes_copied) / static_cast<double>(o.rate_bytes_per_s);
      while (Since(t0) < want) {
        if (o.cancelled && o.cancelled()) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(
            std::min<int64_t>(100, static_cast<int64_t>((want - Since(t0)) * 1000) + 1)));
      }
    }
    return !(o.cancelled && o.cancelled());
  };
  LMC_ASSIGN_OR_RETURN(store::CompactReport r, st.Compact(co, progress));
  const store::StoreStats after = st.Stats();
  // A dry run reclaims nothing: what it would reclaim is the candidates' dead bytes.
  uint64_t would = 0;
  if (o.dry_run) would = before.pack_bytes - std::min(before.pack_bytes, before.live_bytes);
  json j = {{"dry_run", o.dry_run},
            {"threshold", o.threshold},
            {"packs_examined", r.packs_examined},
            {"packs_rewritten", r.packs_compacted},
            {"candidates", r.candidates},
            {"chunks_moved", r.chunks_moved},
            {"bytes_copied", r.bytes_copied},
            {"bytes_reclaimed", r.bytes_reclaimed},
            {"dead_bytes", would},
            {"pack_bytes_before", before.pack_bytes},
            {"pack_bytes_after", after.pack_bytes},
            {"live_bytes", after.live_bytes},
            {"seconds", Since(t0)}};
  return DumpJson(j);
}

Result<std::string> RunFsck(store::Store& st, const FsckRunOptions& o, const EventFn& events) {
  FsckTiming t;
  t.start = Clock::now();
  store::FsckOptions fo;
  fo.repair = o.repair && !o.online;
  fo.decode = o.deep;
  fo.verify_content_hash = o.deep;
  fo.compare_journal = (o.deep || o.repair) && !o.journal_compared;
  auto last = Clock::now();
  fo.progress = [&](uint64_t done, uint64_t total) {
    if (!events || (done != total && Since(last) < 0.2)) return;
    last = Clock::now();
    events(DumpJson(json{{"event", "progress"}, {"op", "fsck"}, {"done", done}, {"total", total}}));
  };
  t.verified_bytes = st.Stats().live_bytes;
  auto sr = st.Fsck(fo);
  if (!sr.ok()) return sr.status();
  t.verify_seconds = Since(t.start);
  return CompleteFsck(st, *sr, o, t);
}

Result<std::string> CompleteFsck(store::Store& st, const store::FsckReport& r, const FsckRunOptions& o,
                                 const FsckTiming& t) {
  LMC_ASSIGN_OR_RETURN(TreeCheck tc, CheckTree(&st));
  if (o.online && (!tc.problems.empty() || !tc.stale_stored.empty())) {
    // Concurrent commits can fall between the per-family snapshots (and a
    // rebase's refresh of the files follows its commit): keep only what a
    // second pass sees too.
    LMC_ASSIGN_OR_RETURN(TreeCheck again, CheckTree(&st));
    std::set<std::pair<std::string, std::string>> seen;
    for (const auto& p : again.problems) seen.emplace(p.key_hex, p.message);
    std::vector<TreeProblem> kept;
    for (auto& p : tc.problems)
      if (seen.count({p.key_hex, p.message})) kept.push_back(std::move(p));
    tc.problems = std::move(kept);
    std::set<std::tuple<uint64_t, uint64_t, uint64_t>> stale;
    for (const auto& s : again.stale_stored) stale.emplace(s.ino, s.recorded, s.actual);
    std::erase_if(tc.stale_stored, [&](const StaleStored& s) {
      return !stale.count({s.ino, s.recorded, s.actual});
    });
  }

  // Chunks the store found bad or missing, confirmed one by one.
  std::set<store::ChunkKey> bad;
  Workspace ws;
  std::vector<uint8_t> buf;
  for (const auto& k : ChunksNamed(r)) {
    auto info = st.GetChunkInfo(k);
    if (!info.ok()) {
      if (info.status().IsNotFound() || info.status().IsCorruption()) bad.insert(k);
      continue;
    }
    buf.resize(std::max<size_t>(info->decoded_len, 1));
    auto n = st.ReadChunk(k, buf.data(), buf.size(), ws);
    if (!n.ok() && n.status().IsCorruption()) bad.insert(k);
  }
  for (const auto& p : tc.problems)
    if (p.kind == TreeProblem::kMissingChunk && p.chunk) bad.insert(*p.chunk);
  LMC_ASSIGN_OR_RETURN(std::vector<std::string> affected, PathsUsingChunks(&st, bad));

  uint64_t tree_fixed = 0;
  json quarantine = json::array();
  // An index that differs from its journal is not repaired from (the store
  // repaired nothing either): rebuild it from the journal first.
  const bool trusted = r.Count(store::FsckProblem::Kind::kIndexJournalMismatch) == 0;
  if (o.repair && !o.online && trusted) {
    for (const auto& p : tc.problems)
      if (p.repairable && p.kind != TreeProblem::kLinkCount)
        quarantine.push_back({{"what", p.message}, {"key_hex", p.key_hex}, {"value_hex", p.value_hex}});
    for (const auto& p : tc.problems)
      if (!p.repairable)
        quarantine.push_back(
            {{"what", p.message}, {"key_hex", p.key_hex}, {"value_hex", p.value_hex}, {"left", true}});
    for (const auto& p : r.problems)
      if (!p.repaired) quarantine.push_back({{"what", p.message}, {"left", true}});
    if (!quarantine.empty() && !o.quarantine_path.empty()) {
      // Written, durably, before the records are removed: the evidence survives a crash.
      LMC_RETURN_IF_ERROR(WriteQuarantineReport(
          o.env ? o.env : store::Env::Default(), o.quarantine_path,
          DumpJson(json{{"v", kProtocolVersion}, {"records", quarantine}, {"affected_files", affected}}, 2) +
              "\n"));
    }
    LMC_ASSIGN_OR_RETURN(tree_fixed, RepairTree(&st, tc));
  }
  // Stored bytes out of date: accounting, not an error; set by --repair.
  const bool stale_repaired = o.repair && !o.online && trusted && !tc.stale_stored.empty();
  if (stale_repaired) LMC_RETURN_IF_ERROR(RepairStoredBytes(&st, tc).status());
  json stale = json::array();
  for (const auto& s : tc.stale_stored)
    stale.push_back({{"path", s.path},
                     {"ino", s.ino},
                     {"recorded", s.recorded},
                     {"actual", s.actual},
                     {"repaired", stale_repaired}});

  const uint64_t errors = r.errors() + tc.problems.size();
  const uint64_t fixed = r.fixed() + tree_fixed;
  json problems = json::array();
  for (const auto& p : tc.problems)
    problems.push_back({{"kind", TreeProblemKindName(p.kind)},
                        {"message", p.message},
                        {"repaired", o.repair && !o.online && p.repairable}});
  json store_problems = json::array();
  for (const auto& p : r.problems) {
    json e = {{"kind", store::FsckProblemKindName(p.kind)}, {"message", p.message}, {"repaired", p.repaired}};
    if (p.key) e["key_hex"] = p.key->ToHex();
    if (p.base) e["base_hex"] = p.base->ToHex();
    if (p.pack_id) e["pack"] = *p.pack_id;
    if (p.offset) e["offset"] = *p.offset;
    if (p.ino) e["ino"] = *p.ino;
    if (!p.path.empty()) e["path"] = p.path;
    store_problems.push_back(std::move(e));
  }
  using K = store::FsckProblem::Kind;
  json j = {{"online", o.online},
            {"repair", o.repair && !o.online},
            {"exit_code", store::FsckExitCode(errors, fixed)},
            {"errors", errors},
            {"fixed", fixed},
            {"seconds", Since(t.start)},
            {"verify_seconds", t.verify_seconds},
            {"verified_bytes", t.verified_bytes},
            {"store",
             {{"chunks_checked", r.chunks_checked},
              {"bad_records", r.Count(K::kBadRecord)},
              {"bad_index_values", r.Count(K::kBadIndexValue)},
              {"missing_chunks", r.Count(K::kMissingChunk)},
              {"refcount_mismatches", r.Count(K::kRefcountMismatch)},
              {"live_bytes_mismatches", r.Count(K::kLiveBytesMismatch)},
              {"orphan_packs", r.Count(K::kOrphanPack)},
              {"orphan_bytes", r.orphan_bytes},
              {"missing_packs", r.Count(K::kMissingPack)},
              {"errors", r.errors()},
              {"fixed", r.fixed()},
              {"messages", r.Messages()},
              {"problems", store_problems}}},
            {"tree",
             {{"inodes", tc.inodes},
              {"dirents", tc.dirents},
              {"extents", tc.extents},
              {"problems", problems},
              {"stale_stored", stale}}},
            {"bad_chunks", json::array()},
            {"affected_files", affected},
            {"quarantine", quarantine.empty() ? "" : o.quarantine_path}};
  for (const auto& k : bad) j["bad_chunks"].push_back(k.ToHex());
  return DumpJson(j);
}

std::function<Status(store::Store&, const EventFn&)> DeadBaseGcHook(ReencodedFn reencoded) {
  return [reencoded = std::move(reencoded)](store::Store& st, const EventFn& events) -> Status {
    auto event = [&](const store::DeadBaseReport& r, std::optional<uint64_t> refreshed) {
      if (!events) return;
      json j = {{"event", "dead_bases"},
                {"done", refreshed.has_value()},
                {"chunks_scanned", r.chunks_scanned},
                {"dead_bases", r.dead_bases},
                {"dead_base_bytes", r.dead_base_bytes},
                {"rewritten", r.rewritten},
                {"bytes_before", r.bytes_before},
                {"bytes_after", r.bytes_after}};
      if (refreshed) j["extents_refreshed"] = *refreshed;
      events(DumpJson(j));
    };
    DeadBaseRun run = RewriteDeadBasesRefreshing(&st, reencoded, [&](const store::DeadBaseReport& p) {
      event(p, std::nullopt);
      return true;
    });
    if (!run.report.ok()) return run.report.status();
    if (!run.refreshed.ok())
      return Status::IOError(
          "dead delta bases were re-encoded, but refreshing the stored bytes of the files using them "
          "failed (" +
          run.refreshed.status().ToString() +
          "); their data is intact, but st_blocks and du may show their old sizes: lmcfs-fsck --repair on "
          "the unmounted store sets them");
    event(*run.report, *run.refreshed);
    return Status::Ok();
  };
}

namespace {

// The memory of the process this runs in (the daemon), by part: what
// /proc/self/status says it holds (VmRSS) and held at most (VmHWM), then
// what the filesystem, the frame pool and the store report. The parts may
// share buffers (a chunk just written is in the chunk cache and among the
// delta policy's bases at once), so they need not sum to less than the
// resident size; what they leave out is the allocator's, the threads'
// stacks and the code.
json MemoryObject(const store::StoreStats& ss, const std::vector<std::pair<std::string, uint64_t>>& fs) {
  const ProcessMemory pm = ReadProcessMemory();
  json m = {{"resident_bytes", pm.resident}, {"peak_resident_bytes", pm.peak}};
  for (const auto& [k, v] : fs) m[k] = v;
  m["frame_pool_bytes"] = store::FramePoolIdleBytes();
  m["frame_pool_capacity"] = store::kFramePoolBytes;
  m["base_cache_bytes"] = ss.base_cache_bytes;
  m["base_cache_capacity"] = ss.base_cache_capacity;
  m["index_memtable_bytes"] = ss.index_memtable_bytes;
  m["index_table_reader_bytes"] = ss.index_table_reader_bytes;
  m["index_block_cache_bytes"] = ss.index_block_cache_bytes;
  m["index_block_cache_capacity"] = ss.index_block_cache_capacity;
  return m;
}

}  // namespace

Result<std::string> RunStat(store::Store& st, const std::string& store_dir,
                            const std::vector<std::string>& paths, const DaemonStats* daemon,
                            double uptime_s) {
  LMC_ASSIGN_OR_RETURN(TreeReport rep, InspectTree(&st, paths));
  json entries = json::array();
  for (const auto& e : rep.entries) {
    json x = Figures(e.space);
    x["path"] = e.path;  // escaped by DumpJson where it is not UTF-8
    if (!IsValidUtf8(e.path)) x["path_hex"] = HexOfBytes(e.path);
    x["ino"] = e.ino;
    x["type"] = TypeName(e.mode);
    x["nlink"] = e.nlink;
    entries.push_back(std::move(x));
  }
  const StoreTotals& t = rep.totals;
  json totals = Figures(t.space);
  totals.update({{"inodes", t.inodes},
                 {"dirs", t.dirs},
                 {"chunks", t.chunks},
                 {"unique_frame_bytes", t.unique_frames},
                 {"delta_chunks", t.delta_chunks},
                 {"delta_frame_bytes", t.delta_frame_bytes},
                 {"packs", t.packs},
                 {"pack_bytes", t.pack_bytes},
                 {"live_bytes", t.live_bytes},
                 {"live_fraction", t.LiveFraction()}});
  totals["dead_bytes"] = t.pack_bytes > t.live_bytes ? t.pack_bytes - t.live_bytes : 0;
  if (!store_dir.empty()) {
    // What the store directory occupies on the backing disk (allocated).
    if (auto u = st.GetDiskUsage(); u.ok()) {
      totals["disk_bytes"] = u->total;
      totals["index_bytes"] = u->index;
      // The packs as du counts them: holes punched for dead records take
      // no space; dead_disk_bytes is what dead records still hold.
      totals["pack_disk_bytes"] = u->packs;
      totals["dead_disk_bytes"] = u->packs > t.live_bytes ? u->packs - t.live_bytes : 0;
    }
  }
  json j = {{"entries", entries}, {"totals", totals}};
  if (!rep.not_found.empty()) j["not_found"] = rep.not_found;
  if (daemon) {
    const store::StoreStats ss = st.Stats();
    json d = {{"uptime_s", uptime_s},
              {"read_only", st.ReadOnly() ? 1 : 0},
              {"store_commits", ss.commits},
              {"store_dedup_hits", ss.dedup_hits},
              {"store_bytes_appended", ss.bytes_appended},
              {"store_corruptions", ss.corruptions},
              {"store_base_cache_hits", ss.base_cache_hits},
              {"store_base_cache_misses", ss.base_cache_misses},
              {"store_rebased", ss.rebased},
              {"store_rebase_skipped", ss.rebase_skipped},
              {"store_pack_bytes_written", ss.pack_bytes_written},
              {"store_index_bytes_written", ss.index_bytes_written},
              {"store_compact_bytes_copied", ss.compact_bytes_copied},
              {"store_compact_bytes_reclaimed", ss.compact_bytes_reclaimed},
              {"store_punched_bytes", ss.punched_bytes},
              {"store_punched_holes", ss.punched_holes}};
    for (const auto& [k, v] : daemon->counters) d[k] = v;
    d["write_amplification"] = WriteAmplification(ss, d.value("write_bytes", uint64_t{0}));
    json delta = json::object();
    for (const auto& [k, v] : daemon->delta) delta[k] = v;
    d["delta"] = std::move(delta);
    if (!daemon->gpu.empty()) d["gpu"] = daemon->gpu;
    d["memory"] = MemoryObject(ss, daemon->memory);
    if (!daemon->dedup.empty()) d["dedup"] = daemon->dedup;
    j["daemon"] = std::move(d);
  }
  return DumpJson(j);
}

double WriteAmplification(const store::StoreStats& st, uint64_t bytes_written_into_mount) {
  if (bytes_written_into_mount == 0) return 0;
  return static_cast<double>(st.pack_bytes_written + st.index_bytes_written) /
         static_cast<double>(bytes_written_into_mount);
}

bool PeerAllowed(int fd, uid_t owner, std::string* why) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    if (why) *why = std::string("cannot read the peer's credentials: ") + std::strerror(errno);
    return false;
  }
  if (cred.uid == 0 || cred.uid == owner) return true;
  if (why)
    *why = "uid " + std::to_string(cred.uid) + " (pid " + std::to_string(cred.pid) +
           ") is neither root nor the mount's owner (uid " + std::to_string(owner) + ")";
  return false;
}

// ------------------------------------------------------------ server

struct ControlServer::Impl {
  store::Store* store = nullptr;
  DaemonStatsFn daemon_stats;
  std::string store_dir, path;
  uid_t owner = 0;
  int listen_fd = -1;
  int wake[2] = {-1, -1};
  std::atomic<bool> stopping{false};
  std::thread acceptor;
  std::mutex mu;  // guards conns and before_compact
  struct Conn {
    int fd;
    std::thread th;
    std::atomic<bool> done{false};
  };
  std::list<Conn> conns;
  std::function<Status(store::Store&, const EventFn&)> before_compact;
  std::mutex gc_mu;  // one store-changing operation at a time
  Clock::time_point started = Clock::now();

  void Accept();
  void Serve(int fd);
  json Handle(const json& req, const EventFn& ev);
  void Reap(bool all);
};

ControlServer::ControlServer() : impl_(std::make_unique<Impl>()) {}
ControlServer::~ControlServer() { Stop(); }

void ControlServer::SetBeforeCompact(std::function<Status(store::Store&, const EventFn&)> fn) {
  std::lock_guard l(impl_->mu);
  impl_->before_compact = std::move(fn);
}

Status ControlServer::Start(store::Store* store, const std::string& store_dir, uid_t owner,
                            DaemonStatsFn daemon_stats, const std::string& socket_path) {
  Impl& s = *impl_;
  if (s.listen_fd >= 0) return Status::InvalidArgument("control server already started");
  s.store = store;
  s.daemon_stats = std::move(daemon_stats);
  s.store_dir = store_dir;
  s.path = socket_path.empty() ? SocketPath(store_dir) : socket_path;
  if (store::IsRadosSpec(store_dir)) {
    std::error_code ec;
    std::filesystem::create_directories(store::LocalDirOf(store_dir), ec);
    if (ec) return Status::IOError("creating " + store::LocalDirOf(store_dir) + ": " + ec.message());
    ::chmod(store::LocalDirOf(store_dir).c_str(), 0700);
  }
  s.owner = owner;
  s.stopping = false;
  s.started = Clock::now();
  sockaddr_un a;
  int dir_fd = -1;
  LMC_RETURN_IF_ERROR(Address(s.path, &a, &dir_fd));
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    if (dir_fd >= 0) ::close(dir_fd);
    return Status::FromErrno(errno, "control socket");
  }
  ::unlink(s.path.c_str());  // stale from a crash: the path is ours (the store lock, or our mountpoint)
  // Created with no permission for anyone else; the owner is set after.
  const mode_t old = ::umask(0177);
  int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  const int bind_err = errno;
  ::umask(old);
  if (dir_fd >= 0) ::close(dir_fd);
  if (rc != 0) {
    ::close(fd);
    return Status::FromErrno(bind_err, "bind control socket " + s.path);
  }
  if (::chmod(s.path.c_str(), 0600) != 0 ||
      (::geteuid() == 0 && owner != 0 && ::chown(s.path.c_str(), owner, static_cast<gid_t>(-1)) != 0) ||
      ::listen(fd, 16) != 0) {
    const int e = errno;
    ::close(fd);
    ::unlink(s.path.c_str());
    return Status::FromErrno(e, "set up control socket " + s.path);
  }
  if (::pipe2(s.wake, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(fd);
    ::unlink(s.path.c_str());
    return Status::FromErrno(e, "control pipe");
  }
  s.listen_fd = fd;
  s.acceptor = std::thread([&s] { s.Accept(); });
  spdlog::info("lmcfs: control channel at {}", s.path);
  return Status::Ok();
}

void ControlServer::Stop() {
  Impl& s = *impl_;
  if (s.listen_fd < 0) return;
  s.stopping = true;
  char c = 0;
  if (::write(s.wake[1], &c, 1) < 0) {
  }
  if (s.acceptor.joinable()) s.acceptor.join();
  {
    std::lock_guard l(s.mu);
    for (auto& cn : s.conns) ::shutdown(cn.fd, SHUT_RDWR);
  }
  s.Reap(true);
  ::close(s.listen_fd);
  ::close(s.wake[0]);
  ::close(s.wake[1]);
  s.listen_fd = s.wake[0] = s.wake[1] = -1;
  ::unlink(s.path.c_str());
}

void ControlServer::Impl::Reap(bool all) {
  std::list<Conn> finished;
  {
    std::lock_guard l(mu);
    for (auto it = conns.begin(); it != conns.end();) {
      if (all || it->done) {
        auto next = std::next(it);
        finished.splice(finished.end(), conns, it);
        it = next;
      } else {
        ++it;
      }
    }
  }
  for (auto& c : finished) c.th.join();
}

void ControlServer::Impl::Accept() {
  while (!stopping) {
    pollfd p[2] = {{listen_fd, POLLIN, 0}, {wake[0], POLLIN, 0}};
    int n = ::poll(p, 2, 1000);
    Reap(false);
    if (n <= 0 || stopping) continue;
    if (!(p[0].revents & POLLIN)) continue;
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard l(mu);
    Conn& c = conns.emplace_back();
    c.fd = fd;
    c.th = std::thread([this, &c] {
      Serve(c.fd);
      ::close(c.fd);
      OPENSSL_thread_stop();  // gc and fsck hash on this thread: free OpenSSL's per-thread state
      c.done = true;
    });
  }
}

void ControlServer::Impl::Serve(int fd) {
  auto reply_error = [&](const std::string& code, const std::string& msg) {
    WriteFrame(fd, DumpJson(json{{"v", kProtocolVersion}, {"ok", false}, {"code", code}, {"error", msg}}));
  };
  std::string why;
  if (!PeerAllowed(fd, owner, &why)) {
    spdlog::warn("lmcfs: control channel {}: refused {}", path, why);
    reply_error("permission_denied", "permission denied: " + why);
    return;
  }
  std::string msg;
  while (ReadFrame(fd, &msg).ok()) {
    json req = json::parse(msg, nullptr, false);
    if (req.is_discarded() || !req.is_object()) {
      reply_error("bad_request", "request is not a JSON object");
      return;
    }
    const int v = req.value("v", 0);
    if (v != kProtocolVersion) {
      reply_error("unsupported_version", "protocol version " + std::to_string(v) +
                                             " not served; this daemon speaks " +
                                             std::to_string(kProtocolVersion));
      continue;
    }
    EventFn ev = [&](const std::string& e) {
      json x = json::parse(e, nullptr, false);
      x["v"] = kProtocolVersion;
      WriteFrame(fd, DumpJson(x));
    };
    json resp;
    try {
      resp = Handle(req, ev);
    } catch (const std::exception& e) {
      resp = {{"ok", false}, {"code", "internal"}, {"error", e.what()}};
    }
    resp["v"] = kProtocolVersion;
    if (!WriteFrame(fd, DumpJson(resp))) return;
  }
}

json ControlServer::Impl::Handle(const json& req, const EventFn& ev) {
  store::Store& st = *store;
  const std::string op = req.value("op", "");
  auto fail = [](const Status& s) { return json{{"ok", false}, {"code", "error"}, {"error", s.ToString()}}; };
  auto ok = [](const std::string& result) { return json{{"ok", true}, {"result", json::parse(result)}}; };
  if (op == "ping") return json{{"ok", true}, {"result", {{"store", store_dir}}}};
  if (op == "stat") {
    std::vector<std::string> paths;
    if (req.contains("paths")) {
      if (!req["paths"].is_array())
        return json{{"ok", false}, {"code", "bad_request"}, {"error", "stat's \"paths\" must be an array"}};
      for (const auto& p : req["paths"]) {
        auto n = NameFromJson(p);
        if (!n.ok()) return json{{"ok", false}, {"code", "bad_request"}, {"error", n.status().message()}};
        paths.push_back(std::move(*n));
      }
    }
    const DaemonStats daemon = daemon_stats ? daemon_stats() : DaemonStats{};
    auto r = RunStat(st, store_dir, paths, &daemon, Since(started));
    if (!r.ok()) return fail(r.status());
    json j = ok(*r);
    j["result"]["store"] = store_dir;
    return j;
  }
  if (op == "gc") {
    std::unique_lock l(gc_mu, std::try_to_lock);
    if (!l.owns_lock())
      return json{{"ok", false},
                  {"code", "busy"},
                  {"error", "another gc is running on this mount; try again when it finishes"}};
    GcOptions o;
    o.threshold = req.value("threshold", 0.5);
    o.rate_bytes_per_s = req.value("rate_bytes_per_s", uint64_t{0});
    o.max_bytes = req.value("max_bytes", UINT64_MAX);
    o.dry_run = req.value("dry_run", false);
    {
      std::lock_guard g(mu);
      o.before_compact = before_compact;
    }
    o.cancelled = [this] { return stopping.load(); };
    if (st.ReadOnly() && !o.dry_run)
      return json{
          {"ok", false},
          {"code", "invalid"},
          {"error", "this mount follows " + store_dir +
                        ", which another mount writes (read-only here): run lmcfs-gc on the mountpoint "
                        "of the node that mounts it read-write"}};
    auto r = RunGc(st, o, ev);
    return r.ok() ? ok(*r) : fail(r.status());
  }
  if (op == "fsck") {
    if (req.value("repair", false))
      return json{
          {"ok", false},
          {"code", "invalid"},
          {"error",
           "repair is not possible while mounted; unmount, then run lmcfs-fsck --repair on the store"}};
    FsckRunOptions o;
    o.online = true;
    o.deep = req.value("deep", false);
    auto r = RunFsck(st, o, ev);
    return r.ok() ? ok(*r) : fail(r.status());
  }
  return json{{"ok", false}, {"code", "bad_request"}, {"error", "unknown op '" + op + "'"}};
}

// ------------------------------------------------------------ client

Status Call(const std::string& socket_path, const std::string& request_json, const EventFn& on_event,
            std::string* response) {
  json req = json::parse(request_json, nullptr, false);
  if (req.is_discarded() || !req.is_object()) return Status::InvalidArgument("request is not a JSON object");
  req["v"] = kProtocolVersion;
  sockaddr_un a;
  int dir_fd = -1;
  LMC_RETURN_IF_ERROR(Address(socket_path, &a, &dir_fd));
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    if (dir_fd >= 0) ::close(dir_fd);
    return Status::FromErrno(errno, "socket");
  }
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  const int err = errno;
  if (dir_fd >= 0) ::close(dir_fd);
  if (rc != 0) {
    ::close(fd);
    if (err == EACCES || err == EPERM)
      return Status::IOError("permission denied on " + socket_path +
                             ": only root and the mount's owner may use it");
    return Status::FromErrno(err, "connect to the daemon at " + socket_path);
  }
  // A refusal (permission_denied) may arrive before the request is sent:
  // a failed send still reads what the daemon answered.
  const bool sent = WriteFrame(fd, DumpJson(req));
  std::string msg;
  for (;;) {
    Status s = ReadFrame(fd, &msg);
    if (!s.ok()) {
      ::close(fd);
      if (!sent) return Status::IOError("the daemon closed the control channel " + socket_path);
      return Status::IOError("no answer from the daemon at " + socket_path + ": " + s.message());
    }
    json j = json::parse(msg, nullptr, false);
    if (j.is_object() && j.contains("event")) {
      if (on_event) on_event(msg);
      continue;
    }
    *response = msg;
    ::close(fd);
    return Status::Ok();
  }
}

}  // namespace lmc::fs::control
