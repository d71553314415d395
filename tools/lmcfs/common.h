// Shared by lmcfs-gc, lmcfs-stat and lmcfs-fsck: what the argument names
// (a mounted filesystem or a store directory), opening a store offline
// with a useful message when it is mounted, talking to the daemon, human
// sizes and the progress bar.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "lmc/fs/control.h"
#include "lmc/status.h"
#include "lmc/store/store.h"

namespace lmc::tools {

// "1.50 GiB"; exact bytes below 1 KiB.
std::string HumanSize(uint64_t bytes);

// A progress bar with rate and ETA on stderr, drawn only when `err` is the
// process's stderr and that is a terminal (so pipes, logs and in-process
// tests see nothing). Redraws at most 10 times a second.
class Progress {
 public:
  Progress(std::ostream& err, std::string label, bool quiet = false);
  ~Progress();  // Finish()
  // done/total in `unit`s; bytes (optional) gives the rate.
  void Update(uint64_t done, uint64_t total, uint64_t bytes = 0);
  void Finish();
  bool enabled() const { return enabled_; }

 private:
  std::ostream& err_;
  std::string label_;
  bool enabled_ = false;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point t0_, last_;
};

// One entry of /proc/mounts for an lmcfs mount.
struct LmcfsMount {
  std::string store;  // from the fsname "lmcfs:STORE" that mount.lmcfs sets
  std::string mountpoint;
};
// Every lmcfs mount listed in mounts_file (escapes like \040 decoded).
std::vector<LmcfsMount> ListLmcfsMounts(const std::string& mounts_file = "/proc/mounts");

// What a tool's first argument names.
struct Target {
  bool online = false;     // a mountpoint: talk to its daemon
  std::string mountpoint;  // online
  std::string store;       // the store directory (both)
  std::string socket;      // online: the control socket
};
// Resolves arg (a mountpoint of lmcfs, or a store directory). Errors say
// what the argument is and what was expected.
Result<Target> ResolveTarget(const std::string& arg);

// What a union mount (lmc/fs/union_fs.h) says of itself on its root's
// user.lmcfs.union: {"stores": [{"name", "writable"}], "shadowed": N,
// "hidden": ["dir/name (first; hidden in other)", ...]}; null when
// `mountpoint` is not a union.
nlohmann::json UnionReport(const std::string& mountpoint);

// Opens a store for offline work. A store held by a mount gives kBusy with
// "STORE is mounted at M; run TOOL on the mountpoint instead" (or a generic
// message when no mount lists it).
// rebuild_damaged_index, rebuild_index: the StoreOptions (fsck --repair).
Result<std::unique_ptr<store::Store>> OpenOffline(const std::string& store_dir, const std::string& tool,
                                                  bool rebuild_damaged_index = false,
                                                  bool rebuild_index = false);

// Sends a request to the daemon; progress events go to on_event. Returns
// the "result" document, or the daemon's error.
Result<std::string> Ask(const Target& t, const std::string& request_json,
                        const fs::control::EventFn& on_event);

// Paths given on the command line -> paths inside the filesystem ("/a/b"):
// absolute ones under the mountpoint lose that prefix; others are taken as
// relative to the filesystem's root.
std::vector<std::string> FsPaths(const Target& t, const std::vector<std::string>& args);

}  // namespace lmc::tools
