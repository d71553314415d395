// The daemon's control channel and the store operations it serves, shared
// with the offline tools (lmcfs-gc, lmcfs-stat, lmcfs-fsck), so that a tool
// gives the same answer whether it runs against a mounted filesystem or an
// unmounted store directory.
//
// Channel: a Unix stream socket STORE/control.sock, mode 0600, owned by the
// daemon's user; the server also checks the peer's credentials (SO_PEERCRED):
// only root and the daemon's uid are served. Framing and messages:
// docs/FORMAT.md, "Control protocol"; design: docs/ARCHITECTURE.md,
// "Operating tools".
//
// Every operation returns its result as a JSON document (text), the same
// document the control protocol carries, so that tools render one format.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "lmc/fs/inspect.h"
#include "lmc/status.h"
#include "lmc/store/store.h"

namespace lmc::fs::control {

inline constexpr int kProtocolVersion = 1;               // docs/FORMAT.md, "Control protocol"
inline constexpr char kSocketName[] = "control.sock";    // in the store directory
inline constexpr uint32_t kMaxMessageBytes = 64u << 20;  // a frame longer than this is refused

// j as JSON text (indented by `indent` spaces, -1: one line). Strings that
// are not valid UTF-8 (a file name is any bytes but '/' and NUL) have those
// bytes written as \xNN (lmc::EscapeBytes) instead of failing the dump:
// every document of the protocol and the tools goes through here.
std::string DumpJson(const nlohmann::json& j, int indent = -1);

// A name (path) as a protocol value that loses no byte: the string itself
// where it is valid UTF-8, otherwise {"hex": "<two hex digits a byte>"}.
nlohmann::json NameToJson(const std::string& name);

// The name back from either form; anything else is InvalidArgument.
Result<std::string> NameFromJson(const nlohmann::json& j);

// Progress events (one JSON object each) streamed while an operation runs.
using EventFn = std::function<void(const std::string& event_json)>;

struct GcOptions {
  double threshold = 0.5;           // compact packs whose live fraction is below this
  uint64_t rate_bytes_per_s = 0;    // copy at most this fast on average (0: unlimited)
  uint64_t max_bytes = UINT64_MAX;  // stop after copying this much
  bool dry_run = false;             // report only
  // Runs before compaction (not on dry runs): the place where chunks whose
  // delta base is otherwise dead get re-encoded, so compaction can drop the
  // base. Unset: nothing to do. Must be safe to run while the filesystem
  // serves requests.
  std::function<Status(store::Store& store, const EventFn& events)> before_compact;
  // Polled between packs; true stops the run (kAborted, work so far kept).
  std::function<bool()> cancelled;
};

// Compaction with rate limit and progress. Result: {"dry_run", "packs_examined",
// "packs_rewritten", "candidates", "chunks_moved", "bytes_copied",
// "bytes_reclaimed", "pack_bytes_before", "pack_bytes_after", "seconds"}.
Result<std::string> RunGc(store::Store& store, const GcOptions& options, const EventFn& events);

struct FsckRunOptions {
  bool repair = false;  // only on an unmounted store
  bool online = false;  // the store is in use: tree checks need two passes to agree
  bool deep = false;    // also decode every frame and check SHA-256(bytes) == key
  // The caller already compared the index with its journal (lmcfs-fsck
  // --repair does, before anything is repaired): Store::Fsck does not again.
  bool journal_compared = false;
  std::string quarantine_path;  // when repairing: where removed records' metadata is written
  store::Env* env = nullptr;    // writes the quarantine report; nullptr: store::Env::Default()
  std::function<bool()> cancelled;
};
// Store::Fsck plus the tree checks, and the paths of the files any
// corruption affects. Result documented in docs/FORMAT.md; its
// "exit_code" follows fsck(8) (store::FsckExit).
Result<std::string> RunFsck(store::Store& store, const FsckRunOptions& options, const EventFn& events);

// The part of RunFsck after Store::Fsck: the tree checks, the chunks the
// report's problems name confirmed bad, the files they affect, with repair
// the quarantine report and the tree repairs; the document. It reads the
// report's structured fields only (kinds, keys, repaired), never message
// text, so rewording a message changes nothing it decides.
struct FsckTiming {
  std::chrono::steady_clock::time_point start =
      std::chrono::steady_clock::now();  // "seconds" counts from here
  double verify_seconds = 0;             // the store part
  uint64_t verified_bytes = 0;
};
Result<std::string> CompleteFsck(store::Store& store, const store::FsckReport& report,
                                 const FsckRunOptions& options, const FsckTiming& timing = {});

// gc's hook for dead delta bases (GcOptions::before_compact, also
// ControlServer::SetBeforeCompact): Store::RewriteDeadBases with the LMC
// codec, one progress event per commit ({"event":"dead_bases",...}), then
// `reencoded` with the dependants it re-encoded (also when it failed part
// way: what it committed changed all the same). The last event says how
// many extents that refreshed ("extents_refreshed").
std::function<Status(store::Store&, const EventFn&)> DeadBaseGcHook(ReencodedFn reencoded);

// What a mounted filesystem adds to a stat's "daemon" object: its own
// counters (name -> value, e.g. fs::Filesystem::NamedCounters, which hold
// the codec paths' cpu_/gpu_ counters) and the delta policy's (reported
// under "delta"), the GPU codec path in words (fs::Filesystem::GpuState;
// "gpu", omitted when empty) and the dedup scope ("all" or "uid"; "dedup",
// omitted when empty). The store's counters are added by RunStat itself.
struct DaemonStats {
  std::vector<std::pair<std::string, uint64_t>> counters;
  std::vector<std::pair<std::string, uint64_t>> delta;
  std::string gpu;
  std::string dedup;
  // Filesystem::MemoryCounters() (mount.lmcfs adds its MemoryTrimmer's
  // counts); RunStat adds the process's resident size, the frame pool's
  // and the store's parts ("memory" object).
  std::vector<std::pair<std::string, uint64_t>> memory;
};
using DaemonStatsFn = std::function<DaemonStats()>;

// Bytes written to the backing disk (packs and index, since the store was
// opened) per byte written into the mount; 0 before any write.
double WriteAmplification(const store::StoreStats& st, uint64_t bytes_written_into_mount);

// Per-file/per-directory figures and store totals (lmc/fs/inspect.h), plus
// "index_bytes" (the index directory's size on disk) when store_dir is
// given, and a "daemon" object when `daemon` is given (a mounted store).
Result<std::string> RunStat(store::Store& store, const std::string& store_dir,
                            const std::vector<std::string>& paths, const DaemonStats* daemon,
                            double uptime_s = 0);

// STORE/control.sock (a RADOS store's: in its default local directory):
// the channel of the mount that holds the store's lock (writes it).
std::string SocketPath(const std::string& store_dir);
// The channel of a mount that follows `store` (holds no lock: a read-only
// mount of a RADOS store, or a union with no writable member) at
// `mountpoint`: next to SocketPath, named by a hash of the mountpoint, so
// that several mounts of one store on a node each keep their own. Tools
// read a mount's channel from its root's user.lmcfs.control_socket.
std::string FollowerSocketPath(const std::string& store, const std::string& mountpoint);

// True if the connected peer on fd may use the channel: root, or `owner`.
// Otherwise *why says who asked.
bool PeerAllowed(int fd, uid_t owner, std::string* why);

// Serves the channel on a thread of its own (one more per connection).
// Requests that change the store (gc) run one at a time.
class ControlServer {
 public:
  ControlServer();
  ~ControlServer();  // Stop()
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Listens on `socket_path` (SocketPath(store_dir) when empty), owned by
  // `owner`, mode 0600. A stale socket file there (left by a crash: the
  // path is this mount's, by the store lock it holds or by its
  // mountpoint) is replaced. `store` must outlive the server;
  // `daemon_stats` (may be empty) is called on a connection thread for
  // each stat request.
  Status Start(store::Store* store, const std::string& store_dir, uid_t owner, DaemonStatsFn daemon_stats,
               const std::string& socket_path = "");
  // Stops listening, cancels running operations between packs, joins.
  void Stop();
  // Installed into every gc's options (GcOptions::before_compact).
  void SetBeforeCompact(std::function<Status(store::Store&, const EventFn&)> fn);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Client: sends one request (a JSON object; "v" is added) and reads events
// until the final response. on_event gets each progress event; *response
// the final one ({"ok": true, "result": ...} or {"ok": false, "error": ...}).
Status Call(const std::string& socket_path, const std::string& request_json, const EventFn& on_event,
            std::string* response);

}  // namespace lmc::fs::control
