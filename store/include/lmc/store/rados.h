// Stores in Ceph RADOS (docs/ARCHITECTURE.md, "Stores in RADOS").
//
// A store named "rados:POOL/NAME" lives in the RADOS namespace NAME of pool
// POOL: every file of the store (CONFIG, pack files, the index journal) is
// one RADOS object named by its path in the store. The node's RocksDB index
// is a local materialization of the journal, kept in a local directory.
//
// RadosEnv is the store's Env over those objects. Appends are guarded: each
// object carries the extended attribute lmcfs.end = "SIZE/COOKIE", and an
// append succeeds only if the object still ends where this client left it,
// so a writer that lost the store (another node took it over) can never
// add a byte to an object the new writer has opened.
//
// Built when librados is found (LMC_HAVE_RADOS); without it, OpenRadosEnv
// returns Unsupported with what to install.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lmc/status.h"
#include "lmc/store/env.h"

namespace lmc::store {

class RadosClient;

// How a read-write opener treats a store another client holds.
enum class Takeover : uint8_t {
  kNo,     // refuse, naming the holder
  kLease,  // wait out the holder's lease (it stopped renewing: dead), then fence it and take over
  kForce,  // fence the holder now, even if it still renews, and take over
};

struct RadosOptions {
  std::string conf;       // ceph.conf; "" = $CEPH_CONF, then Ceph's default search
  std::string client_id;  // cephx user without "client." ("" = admin)
  std::string keyring;    // "" = what ceph.conf names
  // The store's exclusive lock is renewed every lease_seconds / 3; a holder
  // that stops renewing loses it after lease_seconds.
  uint32_t lease_seconds = 20;
  Takeover takeover = Takeover::kNo;
  // Seconds a fenced holder stays on the cluster's blocklist.
  uint32_t blocklist_seconds = 24 * 3600;
  // Refuse every change (a follower reading another node's store).
  bool read_only = false;
  // With read_only: use this connection instead of one of the store's own
  // (a union's followers share one: each librados client runs about 15
  // threads and holds sessions with every OSD). Ignored by a writer.
  std::shared_ptr<RadosClient> client;
};

// A connection to a Ceph cluster (one librados client), shared by the
// stores it is given to; shut down when the last of them closes.
class RadosClient {
 public:
  // Connects with the options' ceph.conf, client id and keyring (bounded:
  // 30 s).
  static Result<std::shared_ptr<RadosClient>> Connect(const RadosOptions& options);
  virtual ~RadosClient() = default;
};

struct RadosSpec {
  std::string pool, name;
};

// Whether `store` names a RADOS store ("rados:" prefix).
bool IsRadosSpec(std::string_view store);
// A union of stores of one pool: "rados:POOL/NAME1,NAME2,..." (at least
// two names, none twice). Returns the pool and the names in order.
Result<std::pair<std::string, std::vector<std::string>>> ParseRadosUnion(std::string_view spec);
// Parses "rados:POOL/NAME" (NAME: letters, digits, '.', '_', '-').
Result<RadosSpec> ParseRadosSpec(std::string_view store);
// The default local directory of a RADOS store's index:
// /var/cache/lmcfs/rados/POOL/NAME for root, else
// $XDG_CACHE_HOME/lmcfs/rados/POOL/NAME (~/.cache/...).
std::string DefaultLocalDir(const RadosSpec& spec);
// The local directory of any store: the store directory itself for a
// POSIX store, DefaultLocalDir for a RADOS one (of a union's first store).
std::string LocalDirOf(const std::string& store);

// The space of a pool as `df` on a mount of one of its stores shows it, in
// bytes stored (before replication or erasure coding).
struct PoolSpace {
  uint64_t total = 0;  // what the pool stores plus avail
  uint64_t avail = 0;  // what it can still take
};
// From the answers of the monitor commands `df` and `osd pool get-quota
// POOL` (JSON): avail is the pool's max_avail (what can still be stored
// there, after its replication or erasure coding and the cluster's full
// ratio), less than what its quota leaves where it has one. NotFound where
// the cluster reports no figures for the pool (no manager daemon runs, or
// none has reported it yet) and it has no quota; Corruption for answers
// that are not such JSON.
Result<PoolSpace> PoolSpaceOf(std::string_view df_json, std::string_view quota_json, std::string_view pool);

// An Env over the objects of one RADOS store: paths are "rados:POOL/NAME/"
// followed by the object's name. LockFile takes the RADOS exclusive lock
// on the object with a lease, renewed by a thread of the lock; once the
// lock is lost (not renewed in time, broken by a takeover, this client
// blocklisted), every later write fails with a message saying so.
class RadosEnv : public Env {
 public:
  // Connects to the cluster (bounded: 30 s) and opens the pool.
  static Result<std::unique_ptr<RadosEnv>> Open(const std::string& store, const RadosOptions& options);
  // Bytes the objects under `dir` hold: their sizes less the bytes
  // PunchHole gave back (each object keeps that count in an attribute).
  // FileDiskBytes is one object's, one read.
  Result<uint64_t> DiskBytes(const std::string& dir) override = 0;
  // The store's pool's space (PoolSpaceOf), asked of the monitors at most
  // every 5 s, as often as the manager reports the pools' figures: a
  // thousand nodes' monitoring agents calling statfs every second cost the
  // monitors 400 commands a second, not 2,000.
  virtual Result<PoolSpace> Space() = 0;
  // This client's address as the cluster sees it (what a takeover fences).
  virtual std::string ClientAddress() const = 0;
  // Whether the store's lock is still held (false once lost).
  virtual bool LockHeld() const = 0;
  // Calls fn (on a librados thread) whenever a client notifies the object
  // at `path`, until the returned handle is destroyed.
  virtual Result<std::unique_ptr<FileLock>> Watch(const std::string& path, std::function<void()> fn) = 0;
  // Notifies the watchers of `path`; asynchronous, never waits for them.
  virtual void Notify(const std::string& path) = 0;
};

}  // namespace lmc::store
