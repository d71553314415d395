// mount.lmcfs: opens the store, mounts, and serves until unmounted
// (umount, fusermount3 -u) or signalled (SIGTERM, SIGINT, SIGHUP); then
// flushes every inode and closes the store cleanly.
//
// Daemon mode forks BEFORE opening the store (RocksDB's threads do not
// survive fork), and the child reports "mounted" or its error through a
// pipe, so the command returns only once the mount is ready and prints the
// real reason when it is not (what fuse_daemonize cannot do once the store
// is open in the parent).
#include "mount_main.h"

#include <dirent.h>
#include <fcntl.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lmc/fs/control.h"
#include "lmc/fs/filesystem.h"
#include "lmc/fs/fuse_session.h"
#include "lmc/fs/inspect.h"
#include "lmc/fs/reclaim.h"
#include "lmc/fs/snapshots.h"
#include "lmc/fs/trim.h"
#include "lmc/fs/union_fs.h"
#include "lmc/gpu.h"
#include "lmc/store/permissions.h"
#include "lmc/store/rados.h"
#include "lmc/store/store.h"
#include "lmc/thread_pool.h"

namespace lmc::fs {
namespace {

constexpr const char* kUsage = R"(Usage: mount.lmcfs [STORE] MOUNTPOINT [-o OPTIONS] [-f] [-snv]

Mounts the lmcfs chunk store STORE at MOUNTPOINT. Files written there are
stored compressed and deduplicated; reads return the exact bytes written.
Returns once the mount is ready and keeps serving in the background;
`umount MOUNTPOINT`, `fusermount3 -u MOUNTPOINT` or SIGTERM flush everything
and stop it.

STORE defaults to /var/lib/lmcfs/default for root and to
$XDG_DATA_HOME/lmcfs/default (~/.local/share/lmcfs/default) otherwise;
it is created on first use.

The store belongs to the user who mounts it: everything created in it is
readable and writable by that user only (directories 0700, files 0600,
whatever the umask), and a store that other users could read or write (a
group or other permission bit anywhere in it, or a file of another user)
is refused: fix it with `chmod -R go-rwx STORE` or `lmcfs-fsck --repair
STORE`. Symbolic links inside the store are never followed.

mount(8) runs this helper for `mount -t lmcfs STORE MOUNTPOINT -o OPTIONS`
and for /etc/fstab lines such as
  /var/lib/lmcfs/ckpt  /ckpt  lmcfs  defaults,cache_size=256M  0  0
once it is installed as /sbin/mount.lmcfs (cmake --install puts it there).

  -f                  stay in the foreground (logs to stderr)
  -s, -n, -v          mount(8) helper flags (sloppy, no mtab, verbose): accepted
  -t TYPE             mount(8)'s type argument: accepted and ignored
  -h, --help          this text
  -V, --version       the release, and the store and codec formats it reads
  -o OPTIONS          comma-separated:
     store=PATH         the store (instead of the STORE argument)
     encode_threads=N   threads that encode written chunks (default: one per
                        core); threads=N is an older name for it
     fuse_threads=N     FUSE worker threads (default: 2 per core, at least 4)
     read_threads=N     threads that read and decode chunks ahead of
                        sequential readers (default: 2 per core, at least 4)
     read_ahead=KIB     the kernel's read-ahead window for the mount, in KiB
                        (default 4096; set as root only; 0 keeps the
                        kernel's 128)
     chunk_size=BYTES   codec chunk size, K/M/G suffixes (default 1M)
     cache_size=BYTES   decoded-chunk cache (default 64M; 128M with gpu=on,
                        so that two read-ahead batches fit in half of it)
     base_cache=BYTES   decoded delta bases kept by the store (default 256M;
                        0: none): a series read in step order decodes each
                        base once
     write_buffer=BYTES memory for written chunks waiting for or in the
                        encoders, over all files (default 256M); writers wait
                        when it is full. Free write buffers kept for the next
                        writes stay within it too
     commit_queue=BYTES encoded frames handed to the committer and not yet
                        written to packs, over all files (default 128M),
                        plus one batch (16M) per writing file; writers wait
                        when it is full. More lets a slow store (RADOS)
                        fall further behind the encoders; 0: a writer
                        hands off a batch once its previous ones are written
     gpu=auto|on|off    the GPU codec path (docs/ARCHITECTURE.md, "GPU codec
                        in the mount"). auto (default): when a usable CUDA GPU
                        is there, written chunks are also encoded in batches
                        on it, beside the encoder threads, once 32 MiB of
                        them wait; otherwise everything runs on the CPU
                        (the log says which, and why). on: refuse to
                        mount without a usable GPU, and the GPU comes first:
                        it encodes every written chunk while it keeps up,
                        the encoder threads only help when it falls a batch
                        behind, and read-ahead decodes batches on it.
                        off: CPU only. A GPU
                        failure while mounted moves the work to the CPU and
                        loses nothing; lmcfs-stat shows what each path did
     delta=on|forward|off
                        incremental snapshots (docs/ARCHITECTURE.md
                        "Incremental snapshots"). on (default): new chunks are
                        written standalone and, in the background, the prior
                        version of each is re-encoded as an XOR delta against
                        it when smaller (the newest save reads at full speed);
                        forward: new chunks are written as deltas against the
                        prior version; off: every chunk standalone
     delta_chain=N      at most N deltas in a row (1-8, default 4): reading a
                        chunk decodes at most N+1 frames
     delta_base=DIR     explicit bases: a directory of the mount (path from its
                        root, e.g. base-model); chunks written outside it are
                        deltas against the chunk of the same tensor (name,
                        dtype, length, offset) in a file directly in DIR, when
                        smaller (fine-tuning from a stored model)
     pair=on|off        on (default): an fp32 tensor chunk whose values are a
                        stored bf16 chunk's rounded (the fp32 master of bf16
                        weights, in the same save or another file) is stored
                        as a delta on that twin when smaller: its upper 16
                        bits cost next to nothing
     gc=auto|off        give dead bytes back in the background (default auto):
                        when more than gc_dead percent of the pack bytes are
                        dead and the mount has been idle for a moment, packs
                        are compacted, emptiest first, and dead delta bases
                        rewritten; it stops for reads and writes. off: only
                        lmcfs-gc compacts (holes are still punched unless
                        punch=off). A read-only mount of a RADOS store
                        reclaims nothing: the writer does
     gc_dead=PCT        the bound on dead pack bytes, 1-90 (default 10)
     trim_idle=SECONDS  once the mount has been quiet this long (no read,
                        write, removal or background work), give the
                        allocator's free memory back to the system
                        (default 10; 0: never); the caches keep what they hold
     journal_snapshot=BYTES
                        the index journal (docs/ARCHITECTURE.md, "The index
                        journal") is snapshotted when the records since
                        the last snapshot reach this size (default 16M), at
                        the mount and the unmount, and while mounted once
                        they also reach four times the snapshot's size.
                        Smaller: the next mount and other nodes' mounts
                        replay less, for more snapshot writes; a node that
                        fell behind a snapshot catches up from it
     punch=on|off       on (default): the disk blocks of a dead record (a
                        file deleted or overwritten, a save rebased as a
                        delta) go back to the filesystem as soon as the change
                        is durable (fallocate PUNCH_HOLE), without copying;
                        off: only compaction gives them back
     allow_other        let other users access the mount (needs user_allow_other
                        in /etc/fuse.conf for non-root); permissions are then
                        checked by the kernel (default_permissions). Chunks
                        are deduplicated across users unless dedup=uid: see
                        README, Security
     dedup=all|uid      all (default): identical chunks are stored once in
                        the whole store; uid: only among files of the same
                        owner, and deltas only between them, so that with
                        allow_other no user learns from their own files'
                        stored size what other users' files hold
  Stores in Ceph RADOS (STORE = rados:POOL/NAME; docs/ARCHITECTURE.md,
  "Stores in RADOS"): packs and the index journal are objects in namespace
  NAME of pool POOL; this node keeps a local copy of the index. One node
  writes a store at a time (a RADOS lock with a lease).
     ceph_conf=PATH     the cluster's ceph.conf (default: $CEPH_CONF, then
                        /etc/ceph/ceph.conf)
     ceph_id=USER       the cephx user, without "client." (default admin)
     keyring=PATH       its keyring (default: what ceph.conf names)
     local_dir=DIR      the local index (default /var/cache/lmcfs/rados/
                        POOL/NAME for root, ~/.cache/lmcfs/rados/... else)
     lease=SECONDS      the lock's lease (default 20): a node that stops
                        renewing it loses the store after that long
     takeover[=force]   take the store over from a node that holds it:
                        waits out the holder's lease (a dead node stops
                        renewing), then fences it (Ceph blocklist) so it
                        can never write again; force: fence it at once
     unsafe_store_perms mount a store that other users can access (see
                        above): the owner means it
     ro                 read-only
     log_file=PATH      log there (default: stderr with -f, nowhere otherwise)
     log_level=LEVEL    trace, debug, info, warn (default), error, off
     nonempty           allow a non-empty mountpoint
  Other options are handed to FUSE; mount(8)'s generic ones (rw, defaults,
  auto, dev, suid, exec, _netdev, ...) are accepted and ignored.
)";

struct Options {
  std::string store, mountpoint, log_file, log_level = "warn";
  unsigned fuse_threads = 0;
  unsigned read_ahead_kb = 4096;
  uint64_t chunk_size = 1u << 20;
  uint64_t cache_size = uint64_t{64} << 20;
  bool cache_size_set = false;  // cache_size= given (else gpu=on raises the default)
  uint64_t base_cache = uint64_t{256} << 20;
  uint64_t write_buffer = uint64_t{256} << 20;
  uint64_t commit_queue = FsOptions{}.commit_queue_limit;
  unsigned encode_threads = 0;
  unsigned read_threads = 0;
  std::string gpu = "auto";
  bool foreground = false, allow_other = false, ro = false, nonempty = false;
  bool unsafe_store_perms = false;  // mount a store other users can access
  bool dedup_per_owner = false;     // dedup=uid
  bool punch = true;                // punch=on|off
  uint64_t journal_snapshot = store::StoreOptions{}.journal_snapshot_bytes;
  store::RadosOptions rados;
  std::string local_dir;
  // A union (STORE = rados:POOL/A,B,...): the pool, the stores in priority
  // order (the writable one first), and which is writable ("" : none).
  std::string pool, rw;
  std::vector<std::string> union_names;
  std::vector<std::string> fuse_opts;
  DeltaOptions delta;
  ReclaimOptions reclaim;
  TrimOptions trim;
};

bool ParseSize(const std::string& s, uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno || end == s.c_str()) return false;
  std::string suf(end);
  if (suf == "")
    *out = v;
  else if (suf == "K" || suf == "k" || suf == "KiB")
    *out = v << 10;
  else if (suf == "M" || suf == "m" || suf == "MiB")
    *out = v << 20;
  else if (suf == "G" || suf == "g" || suf == "GiB")
    *out = v << 30;
  else
    return false;
  return true;
}

// Returns an exit code >= 0 to stop (help or error), -1 to go on.
int ParseArgs(int argc, char** argv, Options* o) {
  std::vector<std::string> pos;
  auto add_opts = [&](const std::string& list) -> bool {
    size_t i = 0;
    while (i <= list.size()) {
      size_t j = list.find(',', i);
      if (j == std::string::npos) j = list.size();
      std::string kv = list.substr(i, j - i);
      i = j + 1;
      if (kv.empty()) continue;
      std::string k = kv, v;
      if (auto eq = kv.find('='); eq != std::string::npos) {
        k = kv.substr(0, eq);
        v = kv.substr(eq + 1);
      }
      auto count = [&](unsigned* out) {
        char* end = nullptr;
        unsigned long x = std::strtoul(v.c_str(), &end, 10);
        if (v.empty() || *end || x == 0 || x > 1024) {
          std::fprintf(stderr, "mount.lmcfs: bad %s '%s' (expected 1 to 1024)\n", k.c_str(), v.c_str());
          return false;
        }
        *out = static_cast<unsigned>(x);
        return true;
      };
      if (k == "store")
        o->store = v;
      else if (k == "encode_threads" || k == "threads") {
        if (!count(&o->encode_threads)) return false;
      } else if (k == "fuse_threads") {
        if (!count(&o->fuse_threads)) return false;
      } else if (k == "read_threads") {
        if (!count(&o->read_threads)) return false;
      } else if (k == "read_ahead") {
        char* end = nullptr;
        unsigned long x = std::strtoul(v.c_str(), &end, 10);
        if (v.empty() || *end || x > (1u << 20)) {
          std::fprintf(stderr, "mount.lmcfs: bad read_ahead '%s' (KiB, 0 to 1048576)\n", v.c_str());
          return false;
        }
        o->read_ahead_kb = static_cast<unsigned>(x);
      } else if (k == "write_buffer") {
        if (!ParseSize(v, &o->write_buffer) || o->write_buffer < (uint64_t{1} << 20)) {
          std::fprintf(stderr, "mount.lmcfs: bad write_buffer '%s' (at least 1M)\n", v.c_str());
          return false;
        }
      } else if (k == "commit_queue") {
        if (!ParseSize(v, &o->commit_queue)) {
          std::fprintf(stderr, "mount.lmcfs: bad commit_queue '%s' (a size: 128M, 1G)\n", v.c_str());
          return false;
        }
      } else if (k == "gpu") {
        if (v != "auto" && v != "on" && v != "off") {
          std::fprintf(stderr, "mount.lmcfs: bad gpu '%s' (expected auto, on or off)\n", v.c_str());
          return false;
        }
        o->gpu = v;
      } else if (k == "chunk_size") {
        if (!ParseSize(v, &o->chunk_size) || o->chunk_size == 0 || o->chunk_size > (1u << 30)) {
          std::fprintf(stderr, "mount.lmcfs: bad chunk_size '%s'\n", v.c_str());
          return false;
        }
      } else if (k == "cache_size") {
        if (!ParseSize(v, &o->cache_size)) {
          std::fprintf(stderr, "mount.lmcfs: bad cache_size '%s'\n", v.c_str());
          return false;
        }
        o->cache_size_set = true;
      } else if (k == "base_cache") {
        if (!ParseSize(v, &o->base_cache)) {
          std::fprintf(stderr, "mount.lmcfs: bad base_cache '%s' (bytes, K/M/G suffixes; 0: none)\n",
                       v.c_str());
          return false;
        }
      } else if (k == "allow_other")
        o->allow_other = true;
      else if (k == "unsafe_store_perms")
        o->unsafe_store_perms = true;
      else if (k == "ceph_conf")
        o->rados.conf = v;
      else if (k == "ceph_id")
        o->rados.client_id = v;
      else if (k == "keyring")
        o->rados.keyring = v;
      else if (k == "local_dir")
        o->local_dir = v;
      else if (k == "rw" && !v.empty())
        o->rw = v;
      else if (k == "lease") {
        unsigned n = 0;
        if (!count(&n) || n < 3) {
          std::fprintf(stderr, "mount.lmcfs: bad lease '%s' (seconds, 3 to 1024)\n", v.c_str());
          return false;
        }
        o->rados.lease_seconds = n;
      } else if (k == "takeover") {
        if (!v.empty() && v != "force" && v != "lease") {
          std::fprintf(stderr, "mount.lmcfs: bad takeover '%s' (takeover or takeover=force)\n", v.c_str());
          return false;
        }
        o->rados.takeover = v == "force" ? store::Takeover::kForce : store::Takeover::kLease;
      } else if (k == "dedup") {
        if (v != "all" && v != "uid") {
          std::fprintf(stderr, "mount.lmcfs: bad dedup '%s' (expected all or uid)\n", v.c_str());
          return false;
        }
        o->dedup_per_owner = v == "uid";
      } else if (k == "ro")
        o->ro = true;
      else if (k == "log_file")
        o->log_file = v;
      else if (k == "log_level") {
        if (v != "trace" && v != "debug" && v != "info" && v != "warn" && v != "warning" && v != "error" &&
            v != "err" && v != "critical" && v != "off") {
          std::fprintf(stderr, "mount.lmcfs: bad log_level '%s' (trace, debug, info, warn, error, off)\n",
                       v.c_str());
          return false;
        }
        o->log_level = v;
      } else if (k == "delta" || k == "delta_chain" || k == "delta_base" || k == "pair") {
        auto r = ParseDeltaOption(k, v, &o->delta);
        if (!r.ok()) {
          std::fprintf(stderr, "mount.lmcfs: %s\n", r.status().message().c_str());
          return false;
        }
      } else if (k == "gc" || k == "gc_dead") {
        auto r = ParseReclaimOption(k, v, &o->reclaim);
        if (!r.ok()) {
          std::fprintf(stderr, "mount.lmcfs: %s\n", r.status().message().c_str());
          return false;
        }
      } else if (k == "trim_idle") {
        char* end = nullptr;
        errno = 0;
        const unsigned long secs = std::strtoul(v.c_str(), &end, 10);
        if (v.empty() || errno || *end || secs > 86400) {
          std::fprintf(stderr, "mount.lmcfs: bad trim_idle '%s' (seconds, 0-86400; 0: never)\n", v.c_str());
          return false;
        }
        o->trim.idle = std::chrono::seconds(secs);
      } else if (k == "journal_snapshot") {
        if (!ParseSize(v, &o->journal_snapshot) || o->journal_snapshot < 1024) {
          std::fprintf(stderr, "mount.lmcfs: bad journal_snapshot '%s' (a size of at least 1K: 64K, 16M)\n",
                       v.c_str());
          return false;
        }
      } else if (k == "punch") {
        if (v != "on" && v != "off") {
          std::fprintf(stderr, "mount.lmcfs: bad punch '%s' (expected on or off)\n", v.c_str());
          return false;
        }
        o->punch = v == "on";
      } else if (k == "nonempty")
        o->nonempty = true;
      else if (k == "rw" || k == "defaults" || k == "auto" || k == "noauto" || k == "user" || k == "nouser" ||
               k == "users" || k == "exec" || k == "noexec" || k == "suid" || k == "nosuid" || k == "dev" ||
               k == "nodev" || k == "_netdev" || k == "nofail" || k == "default_permissions" ||
               k == "async" || k == "atime" || k == "noatime" || k == "relatime" || k == "norelatime" ||
               k == "strictatime" || k == "loop" || k.rfind("x-", 0) == 0 || k == "comment") {
      } else {
        o->fuse_opts.push_back(kv);
      }
    }
    return true;
  };
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "-V" || a == "--version") {
      std::printf("%s\n", store::VersionText("mount.lmcfs").c_str());
      return 0;
    } else if (a == "-f") {
      o->foreground = true;
    } else if (a == "-o") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "mount.lmcfs: -o needs an argument\n%s", kUsage);
        return 16;
      }
      if (!add_opts(argv[++i])) return 16;
    } else if (a.rfind("-o", 0) == 0) {
      if (!add_opts(a.substr(2))) return 16;
    } else if (a == "-n" || a == "-s" || a == "-v" || a == "-sv" || a == "-vs" || a == "-nv" || a == "-vn" ||
               a == "-sn" || a == "-ns") {
      // mount(8) helper flags: no mtab, sloppy, verbose.
    } else if (a == "-t") {
      // mount(8) may pass the type (lmcfs or lmcfs.SUBTYPE): nothing to choose.
      if (i + 1 < argc) i++;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "mount.lmcfs: unknown flag %s\n%s", a.c_str(), kUsage);
      return 16;
    } else {
      pos.push_back(a);
    }
  }
  if (pos.size() == 1) {
    o->mountpoint = pos[0];
  } else if (pos.size() == 2) {
    if (o->store.empty()) o->store = pos[0];
    o->mountpoint = pos[1];
  } else {
    std::fprintf(stderr, "mount.lmcfs: expected [STORE] MOUNTPOINT\n%s", kUsage);
    return 16;
  }
  if (o->store.empty()) {
    if (geteuid() == 0) {
      o->store = "/var/lib/lmcfs/default";
    } else if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) {
      o->store = std::string(x) + "/lmcfs/default";
    } else if (const char* h = std::getenv("HOME"); h && *h) {
      o->store = std::string(h) + "/.local/share/lmcfs/default";
    } else {
      std::fprintf(stderr, "mount.lmcfs: no STORE given and no HOME to default to\n");
      return 16;
    }
  }
  return -1;
}

// Whether `dir` (a real path) is the mount point of a mounted filesystem,
// from /proc/self/mountinfo (field 5; octal escapes for space, tab, \\, \n).
bool IsMountPoint(const std::string& dir) {
  FILE* f = std::fopen("/proc/self/mountinfo", "r");
  if (!f) return false;
  char* line = nullptr;
  size_t cap = 0;
  bool found = false;
  while (!found && getline(&line, &cap, f) > 0) {
    char mp[PATH_MAX + 1];
    if (std::sscanf(line, "%*s %*s %*s %*s %4096s", mp) != 1) continue;
    std::string un;
    for (size_t i = 0; mp[i]; i++) {
      if (mp[i] == '\\' && mp[i + 1] >= '0' && mp[i + 1] <= '7' && mp[i + 2] && mp[i + 3]) {
        un += static_cast<char>((mp[i + 1] - '0') * 64 + (mp[i + 2] - '0') * 8 + (mp[i + 3] - '0'));
        i += 3;
      } else {
        un += mp[i];
      }
    }
    found = un == dir;
  }
  std::free(line);
  std::fclose(f);
  return found;
}

// A store other users can reach is refused unless unsafe_store_perms
// (docs/ARCHITECTURE.md, "Store permissions").
int CheckStorePermissions(const Options& o) {
  auto loose = store::FindLoosePaths(o.store, geteuid());
  if (!loose.ok()) {
    std::fprintf(stderr, "mount.lmcfs: store %s: %s\n", o.store.c_str(), loose.status().message().c_str());
    return 32;
  }
  if (loose->empty()) return 0;
  if (o.unsafe_store_perms) {
    std::fprintf(stderr, "mount.lmcfs: warning: %s (mounting anyway: unsafe_store_perms)\n",
                 loose->front().Describe().c_str());
    return 0;
  }
  std::fprintf(stderr, "mount.lmcfs: %s\n", store::LoosePathsMessage(o.store, *loose).c_str());
  return 32;
}

// Checks that fail fast with a message a user can act on.
int Validate(Options* o) {
  // gpu=on is checked by Serve, after the fork: CUDA initialized in this
  // process would not be usable in the daemon child.
  if (access("/dev/fuse", R_OK | W_OK) != 0) {
    std::fprintf(stderr,
                 "mount.lmcfs: /dev/fuse is %s: load the fuse module (modprobe fuse), or in a "
                 "container pass --device /dev/fuse\n",
                 errno == ENOENT ? "missing" : "not accessible");
    return 32;
  }
  char buf[PATH_MAX];
  if (!realpath(o->mountpoint.c_str(), buf)) {
    if (errno == ENOTCONN) {
      std::fprintf(stderr,
                   "mount.lmcfs: mountpoint %s is busy: a FUSE mount whose daemon died is still "
                   "there (clear it with fusermount3 -u -z %s)\n",
                   o->mountpoint.c_str(), o->mountpoint.c_str());
    } else {
      std::fprintf(stderr, "mount.lmcfs: mountpoint %s: %s\n", o->mountpoint.c_str(), std::strerror(errno));
    }
    return 32;
  }
  o->mountpoint = buf;
  if (IsMountPoint(o->mountpoint)) {
    std::fprintf(stderr,
                 "mount.lmcfs: mountpoint %s is busy: something is already mounted there "
                 "(unmount it first: umount %s, or fusermount3 -u %s)\n",
                 buf, buf, buf);
    return 32;
  }
  struct stat st;
  if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) {
    std::fprintf(stderr, "mount.lmcfs: mountpoint %s is not a directory\n", buf);
    return 32;
  }
  if (!o->nonempty) {
    DIR* d = opendir(buf);
    if (!d) {
      std::fprintf(stderr, "mount.lmcfs: mountpoint %s: %s\n", buf, std::strerror(errno));
      return 32;
    }
    bool empty = true;
    while (dirent* e = readdir(d)) {
      if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) {
        empty = false;
        break;
      }
    }
    closedir(d);
    if (!empty) {
      std::fprintf(stderr, "mount.lmcfs: mountpoint %s is not empty (use -o nonempty to mount over it)\n",
                   buf);
      return 32;
    }
  }
  // A RADOS store: the cluster's own permissions (cephx) guard it; the
  // local index directory is made owner-only by the store.
  if (store::IsRadosSpec(o->store) && o->store.find(',') != std::string::npos) {
    auto u = store::ParseRadosUnion(o->store);
    if (!u.ok()) {
      std::fprintf(stderr, "mount.lmcfs: %s\n", u.status().message().c_str());
      return 32;
    }
    o->pool = u->first;
    o->union_names = u->second;
    if (!o->rw.empty()) {
      auto it = std::find(o->union_names.begin(), o->union_names.end(), o->rw);
      if (it == o->union_names.end()) {
        std::fprintf(stderr, "mount.lmcfs: rw=%s is not one of the stores of %s\n", o->rw.c_str(),
                     o->store.c_str());
        return 32;
      }
      std::rotate(o->union_names.begin(), it, it + 1);  // the writable store first
    }
    o->store = "rados:" + o->pool + "/" + o->union_names[0];
    return 0;
  }
  if (!o->rw.empty()) {
    std::fprintf(stderr, "mount.lmcfs: rw= names the writable store of a union (rados:POOL/A,B,...)\n");
    return 32;
  }
  if (store::IsRadosSpec(o->store)) {
    auto spec = store::ParseRadosSpec(o->store);
    if (!spec.ok()) {
      std::fprintf(stderr, "mount.lmcfs: %s\n", spec.status().message().c_str());
      return 32;
    }
    o->store = "rados:" + spec->pool + "/" + spec->name;
    return 0;
  }
  // The store directory is the owner's only (its parents: the umask, 077
  // since MountMain set it).
  std::error_code ec;
  const std::filesystem::path store_path(o->store);
  if (store_path.has_parent_path()) std::filesystem::create_directories(store_path.parent_path(), ec);
  bool created = false;
  if (!ec) {
    if (mkdir(o->store.c_str(), store::kStoreDirMode) == 0)
      created = true;
    else if (errno != EEXIST)
      ec = std::error_code(errno, std::generic_category());
  }
  if (ec) {
    std::fprintf(stderr, "mount.lmcfs: cannot create store directory %s: %s\n", o->store.c_str(),
                 ec.message().c_str());
    return 32;
  }
  if (!realpath(o->store.c_str(), buf)) {
    std::fprintf(stderr, "mount.lmcfs: store %s: %s\n", o->store.c_str(), std::strerror(errno));
    return 32;
  }
  o->store = buf;
  // Said on stderr: a mistyped store path mounts an empty store,
  // and the checkpoints the user looks for are in the one meant.
  if (created)
    std::fprintf(stderr, "mount.lmcfs: %s did not exist: made it for a new store\n", o->store.c_str());
  // A new store in an empty directory the user made for it (`mkdir S &&
  // mount.lmcfs S M`): nothing in it to protect yet, so it becomes the
  // owner's only instead of being refused.
  struct stat sd;
  if (stat(o->store.c_str(), &sd) == 0 && S_ISDIR(sd.st_mode) && sd.st_uid == geteuid() &&
      (sd.st_mode & 077) != 0 && std::filesystem::is_empty(o->store, ec) && !ec) {
    if (chmod(o->store.c_str(), store::kStoreDirMode) != 0) {
      std::fprintf(stderr, "mount.lmcfs: cannot make the new store directory %s private: %s\n",
                   o->store.c_str(), std::strerror(errno));
      return 32;
    }
  }
  return CheckStorePermissions(*o);
}

void SetupLogging(const Options& o) {
  std::shared_ptr<spdlog::logger> logger;
  try {
    if (!o.log_file.empty()) {
      logger = spdlog::basic_logger_mt("lmcfs", o.log_file);
    } else {
      logger = spdlog::stderr_color_mt("lmcfs");
    }
    logger->set_level(spdlog::level::from_str(o.log_level));
    logger->flush_on(spdlog::level::info);
    spdlog::set_default_logger(logger);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mount.lmcfs: log file %s: %s\n", o.log_file.c_str(), e.what());
  }
}

// Writes the child's verdict to the parent: "0" or "<code> <message>".
void Report(int fd, int code, const std::string& msg) {
  if (fd < 0) {
    if (code) std::fprintf(stderr, "mount.lmcfs: %s\n", msg.c_str());
    return;
  }
  std::string s = std::to_string(code) + " " + msg;
  ssize_t w = write(fd, s.data(), s.size());
  (void)w;
  close(fd);
}

// The GPU codec for gpu=auto|on|off (FsOptions::gpu), opened in the
// process that serves. *why: why there is none, or "" with one. Returns
// false (after reporting) when gpu=on cannot be honoured.
bool OpenGpu(const Options& o, int report_fd, std::unique_ptr<GpuCodec>* codec, std::string* why) {
  if (o.gpu == "off") {
    *why = "gpu=off";
    return true;
  }
  auto g = GpuCodec::Open();
  if (g.ok()) {
    *codec = std::move(g).value();
    why->clear();
    return true;
  }
  *why = "gpu=" + o.gpu + ": " + g.status().message();
  if (o.gpu == "on") {
    Report(report_fd, 32,
           "gpu=on but the GPU codec cannot be used (" + g.status().message() + "; GPU: " + GpuDescription() +
               "); mount with gpu=auto or gpu=off to use the CPU codec");
    return false;
  }
  return true;
}

// Stores another node writes, followed: each is refreshed when its writer
// notifies (RADOS watch/notify) and at least once a second, and its
// filesystem then forgets the inodes it holds and tells the kernel of each
// file that changed (Filesystem::FollowerRefreshed), so that what that node
// closed is seen here within a second (docs/ARCHITECTURE.md, "The union").
// A union's store that does not exist yet (its node has not mounted) is
// opened once it does, and joins the union then.
class Followers {
 public:
  ~Followers() { Stop(); }
  // The primary store, mounted read-only: owned by the caller.
  void AddPrimary(const std::string& name, store::Store* store, Filesystem* fs) {
    auto f = std::make_unique<Follower>();
    f->name = name;
    f->store = store;
    f->fs = fs;
    list_.push_back(std::move(f));
  }
  // Member idx of the union: opened now if it can be, else when it appears.
  // Errors other than "no such store" are returned.
  Status AddMember(const std::string& name, const std::string& spec, const store::StoreOptions& so,
                   const FsOptions& fo, size_t idx) {
    auto f = std::make_unique<Follower>();
    f->name = name;
    f->spec = spec;
    f->so = so;
    f->fo = fo;
    f->idx = idx;
    Status st = f->TryOpen();
    if (!st.ok() && st.code() != Code::kNotFound) return st;
    if (!st.ok())
      spdlog::info("lmcfs: union store {} does not exist yet; it joins when its node writes it", spec);
    list_.push_back(std::move(f));
    return Status::Ok();
  }
  Filesystem* Fs(const std::string& name) {
    for (auto& f : list_)
      if (f->name == name) return f->fs;
    return nullptr;
  }
  void Start(UnionFs* u) {
    for (auto& f : list_) {
      Follower* p = f.get();
      p->union_fs = u;
      if (p->fs) p->Watch();
      p->thread = std::thread([p] { p->Run(); });
    }
  }
  void Stop() {
    for (auto& f : list_) {
      {
        std::lock_guard l(f->mu);
        f->stop = true;
      }
      f->cv.notify_all();
      if (f->thread.joinable()) f->thread.join();
      f->watch.reset();
    }
    for (auto& f : list_) {
      if (f->owned_fs) (void)f->owned_fs->Shutdown();
      f->owned_fs.reset();
      f->owned_store.reset();
    }
    list_.clear();
  }

 private:
  struct Follower {
    std::string name, spec;
    store::StoreOptions so;
    FsOptions fo;
    size_t idx = 0;
    UnionFs* union_fs = nullptr;
    store::Store* store = nullptr;
    Filesystem* fs = nullptr;
    std::unique_ptr<store::Store> owned_store;
    std::unique_ptr<Filesystem> owned_fs;
    std::unique_ptr<store::FileLock> watch;
    std::thread thread;
    std::mutex mu;
    std::condition_variable cv;
    bool poke = false, stop = false;

    Status TryOpen() {
      auto st = store::Store::Open(spec, so);
      if (!st.ok()) return st.status();
      auto fsr = Filesystem::Open(st->get(), spec, fo);
      if (!fsr.ok()) return fsr.status();
      owned_store = std::move(st).value();
      owned_fs = std::move(fsr).value();
      store = owned_store.get();
      fs = owned_fs.get();
      return Status::Ok();
    }
    void Watch() {
      auto w = store->WatchChanges([this] {
        std::lock_guard l(mu);
        poke = true;
        cv.notify_all();
      });
      if (w.ok())
        watch = std::move(w).value();
      else
        spdlog::warn("lmcfs: cannot watch {} ({}); following it by polling once a second", name,
                     w.status().ToString());
    }
    void Run() {
      std::unique_lock l(mu);
      while (!stop) {
        cv.wait_for(l, std::chrono::seconds(1), [&] { return poke || stop; });
        if (stop) break;
        poke = false;
        l.unlock();
        if (!fs) {
          if (TryOpen().ok()) {
            Watch();
            if (union_fs) union_fs->Attach(idx, fs);
            spdlog::info("lmcfs: union store {} appeared and joined the union", spec);
          }
        } else {
          Filesystem::Refreshed changed;
          auto n = store->Refresh([&](store::Cf cf, std::string_view key, store::Store::KeyChange how) {
            changed.Add(cf, key, how);
          });
          if (!n.ok()) spdlog::error("lmcfs: following {}: {}", name, n.status().ToString());
          // Also with nothing new: files that changed while open here are
          // told of once closed.
          fs->FollowerRefreshed(changed);
        }
        l.lock();
      }
    }
  };
  std::vector<std::unique_ptr<Follower>> list_;
};

// Opens, mounts and serves. report_fd: the parent's pipe (daemon) or -1.
int Serve(const Options& o, int report_fd) {
  SetupLogging(o);
  // Before the store: a refused gpu=on touches nothing. Declared before the
  // filesystem, which uses it, so that it is destroyed after it.
  std::unique_ptr<GpuCodec> gpu;
  std::string gpu_why;
  if (!OpenGpu(o, report_fd, &gpu, &gpu_why)) return 32;
  store::StoreOptions so;
  so.chunk_size = static_cast<uint32_t>(o.chunk_size);
  so.base_cache_bytes = o.base_cache;
  so.punch_dead = o.punch;
  so.journal_snapshot_bytes = o.journal_snapshot;
  const bool is_union = !o.union_names.empty();
  // A RADOS store mounted read-only, and a union's stores but the writable
  // one, are followers: no lock, the writer's commits applied as they come.
  const bool primary_follows = store::IsRadosSpec(o.store) && (o.ro || (is_union && o.rw.empty()));
  so.create_if_missing = !o.ro && !primary_follows;
  so.read_only = primary_follows;
  so.rados = o.rados;
  // A union's followers share one connection to the cluster (a writable
  // store keeps its own: fencing it must not cut the others' reads).
  std::shared_ptr<store::RadosClient> follower_client;
  if (is_union) {
    auto c = store::RadosClient::Connect(o.rados);
    if (!c.ok()) {
      Report(report_fd, 32,
             "cannot connect to the Ceph cluster of " + o.store + ": " + c.status().ToString());
      return 32;
    }
    follower_client = std::move(c).value();
    if (primary_follows) so.rados.client = follower_client;
  }
  so.local_dir = is_union && !o.local_dir.empty() ? o.local_dir + "/" + o.union_names[0] : o.local_dir;
  auto st = store::Store::Open(o.store, so);
  if (!st.ok()) {
    std::string m =
        st.status().code() == Code::kBusy
            ? "store " + o.store + " is in use by another mount or process (" + st.status().message() + ")"
        : st.status().code() == Code::kUnsupported
            ? "store " + o.store + " was written by a newer lmcfs: " + st.status().message()
            : "cannot open store " + o.store + ": " + st.status().ToString() +
                  (st.status().IsCorruption()
                       ? "; run lmcfs-fsck " + o.store + " for what is damaged and what to do"
                       : "");
    Report(report_fd, 32, m);
    return 32;
  }
  std::unique_ptr<store::Store> store = std::move(st).value();
  // gpu=on reads ahead in two batches of kGpuMinBatchBytes, which must fit
  // in half the cache (FileData::ReadAheadWindow): 128 MiB unless set.
  const uint64_t cache_size = o.gpu == "on" && !o.cache_size_set
                                  ? std::max<uint64_t>(o.cache_size, 4 * uint64_t{kGpuMinBatchBytes})
                                  : o.cache_size;
  // A union's stores share one decoded-chunk cache of cache_size (each
  // store's chunks under its own tag), so that the mount's memory does not
  // grow with the number of stores; declared before the filesystems that
  // use it, so that it outlives them.
  std::unique_ptr<store::ChunkCache> union_cache;
  if (is_union) union_cache = std::make_unique<store::ChunkCache>(cache_size);
  // And one read-ahead pool: threads of their own per store would each
  // warm up memory of their own (docs/BENCHMARKS.md, "Stores in RADOS").
  std::unique_ptr<ThreadPool> union_read_pool;
  if (is_union) union_read_pool = std::make_unique<ThreadPool>(ReadAheadThreads(o.read_threads));
  FsOptions fo;
  fo.chunk_size = static_cast<uint32_t>(o.chunk_size);
  fo.cache_bytes = cache_size;
  fo.shared_cache = union_cache.get();  // the writable store's tag is 0
  fo.read_pool = union_read_pool.get();
  fo.write_budget = o.write_buffer;
  fo.commit_queue_limit = o.commit_queue;
  fo.encode_threads = o.encode_threads;
  fo.read_threads = o.read_threads;
  fo.read_only = o.ro || primary_follows;
  fo.dedup_per_owner = o.dedup_per_owner;
  fo.gpu = gpu.get();
  fo.gpu_first = o.gpu == "on";
  if (!gpu) fo.gpu_none_reason = gpu_why;
  auto fsr = Filesystem::Open(store.get(), o.store, fo);
  if (!fsr.ok()) {
    Report(report_fd, 32, "cannot open the filesystem in " + o.store + ": " + fsr.status().ToString());
    return 32;
  }
  std::unique_ptr<Filesystem> fs = std::move(fsr).value();
  if (!primary_follows) InstallSnapshotPolicy(fs.get(), o.delta);
  // The union's other stores, followed (lmc/fs/union_fs.h).
  Followers followers;
  if (primary_follows)
    followers.AddPrimary(o.union_names.empty() ? o.store : o.union_names[0], store.get(), fs.get());
  for (size_t i = 1; i < o.union_names.size(); ++i) {
    store::StoreOptions fso = so;
    fso.read_only = true;
    fso.create_if_missing = false;
    fso.rados.client = follower_client;
    fso.local_dir = o.local_dir.empty() ? "" : o.local_dir + "/" + o.union_names[i];
    FsOptions ffo = fo;
    ffo.shared_cache_tag = static_cast<uint32_t>(i);
    ffo.read_only = true;
    ffo.gpu = nullptr;
    const std::string spec = "rados:" + o.pool + "/" + o.union_names[i];
    if (Status fst = followers.AddMember(o.union_names[i], spec, fso, ffo, i); !fst.ok()) {
      Report(report_fd, 32, "cannot open store " + spec + " of the union: " + fst.ToString());
      return 32;
    }
  }
  std::unique_ptr<UnionFs> union_fs;
  if (is_union) {
    std::vector<UnionMember> members;
    members.push_back({o.union_names[0], fs.get(), !primary_follows});
    for (size_t i = 1; i < o.union_names.size(); ++i)
      members.push_back({o.union_names[i], followers.Fs(o.union_names[i]), false});
    union_fs = std::make_unique<UnionFs>(std::move(members));
  }
  followers.Start(union_fs.get());
  // Background reclamation (lmc/fs/reclaim.h): idle means no read, write or
  // removal since the last poll and no rebase pending.
  Filesystem* f = fs.get();
  // Chunks re-encoded by gc changed length: the files using them follow.
  auto reencoded = [f](const std::vector<store::ChunkKey>& keys) { return f->ChunksReencoded(keys); };
  // A gc or a rebase of a shared chunk that a crash cut short between its
  // re-encoding and the refresh of the files using the chunks.
  if (!(o.ro || primary_follows)) {
    if (auto left = RefreshLeftOver(f->store(), reencoded); !left.ok())
      spdlog::warn(
          "lmcfs: refreshing the stored bytes an earlier mount or gc left to refresh failed ({}); st_blocks "
          "and du "
          "may show old sizes for some files (lmcfs-fsck --repair on the unmounted store sets them)",
          left.status().ToString());
  }
  // A follower's store is the writer's to reclaim (its compaction, its
  // holes): reclamation here would only fail, a pass at a time.
  ReclaimOptions reclaim = o.reclaim;
  if (primary_follows) reclaim.enabled = false;
  Reclaimer reclaimer(
      store.get(), reclaim,
      [f] {
        const FsCounters& c = f->counters();
        return ReclaimActivity{c.write_calls + c.read_calls + c.removals, c.removals};
      },
      reencoded);
  // Free memory back to the system once the mount goes quiet (lmc/fs/trim.h):
  // quiet means no read, write, removal, chunk applied, data commit, flush,
  // fsync, release or reclamation pass since the last poll, none of them
  // still running, and no rebase pending (a writer's fsync and close encode
  // and commit what its writes left, and may wait on the disk for longer
  // than the quiet time; the blocks they free come back after that, and
  // trimming before it would miss them).
  // Released: the write blocks kept for the next writes past 64 MiB, then
  // the allocator's free memory.
  MemoryTrimmer trimmer(
      o.trim,
      [f, &reclaimer, u = union_fs.get()] {
        const FsCounters& c = f->counters();
        // A union's reads of other nodes' files count too (their members'
        // filesystems count them).
        uint64_t reads = c.read_calls;
        if (u)
          for (const Filesystem* m : u->Filesystems())
            if (m != f) reads += m->counters().read_calls;
        return TrimActivity{c.write_calls + reads + c.removals + c.chunks_written + c.commits +
                                c.flush_calls + reclaimer.Stats().passes,
                            f->BackgroundPending() > 0 || c.flushes_in_flight > 0};
      },
      [] { return ReleaseFreeMemory(Filesystem::ReleaseIdleWriteBlocks); });
  // A union's figures are its members' summed: reads of other nodes' files
  // are counted by the followers' filesystems.
  auto daemon_counters = [&reclaimer, f, u = union_fs.get()] {
    auto v = u ? u->NamedCounters() : f->NamedCounters();
    for (auto& x : reclaimer.Stats().Named()) v.push_back(std::move(x));
    v.emplace_back("reclaim_enabled", reclaimer.options().enabled ? 1 : 0);
    return v;
  };
  // The same figures on the mount root (getfattr -d -m - MOUNT).
  // The control channel (lmcfs-gc/-stat/-fsck): the store's own socket
  // for the mount that holds its lock; one per mountpoint for a follower,
  // so that a writer and its followers on one node each keep theirs. Tools
  // read it from the root's user.lmcfs.control_socket.
  const std::string control_path =
      primary_follows ? control::FollowerSocketPath(o.store, o.mountpoint) : control::SocketPath(o.store);
  f->SetRootAttributes([&reclaimer, f, control_path] {
    std::vector<std::pair<std::string, std::string>> a;
    a.emplace_back("control_socket", control_path);
    const store::StoreStats ss = f->store()->Stats();
    const ReclaimStats rs = reclaimer.Stats();
    a.emplace_back("dead_bytes", std::to_string(ss.dead_bytes()));
    a.emplace_back("pack_bytes", std::to_string(ss.pack_bytes));
    a.emplace_back("dead_disk_bytes", std::to_string(ss.dead_disk_bytes()));
    a.emplace_back("pack_disk_bytes", std::to_string(ss.pack_disk_bytes));
    a.emplace_back("punched_bytes", std::to_string(ss.punched_bytes));
    if (auto u = f->store()->KnownDiskUsage(); u.ok()) a.emplace_back("disk_bytes", std::to_string(u->total));
    a.emplace_back("reclaimed_bytes", std::to_string(rs.bytes_reclaimed));
    a.emplace_back("reclaim_copied_bytes", std::to_string(rs.bytes_copied));
    a.emplace_back("reclaim_passes", std::to_string(rs.passes));
    a.emplace_back("reclaim_last_pass_unix", std::to_string(rs.last_pass_unix));
    char wa[32];
    std::snprintf(wa, sizeof wa, "%.3f", control::WriteAmplification(ss, f->counters().write_bytes));
    a.emplace_back("write_amplification", wa);
    return a;
  });
  // The control channel of lmcfs-gc/-stat/-fsck (lmc/fs/control.h); the
  // mount serves without it if it cannot start.
  control::ControlServer control;
  FuseSessionOptions session;
  session.mountpoint = o.mountpoint;
  session.fsname = o.store;
  if (is_union) {
    session.fsname = "rados:" + o.pool + "/";
    for (size_t i = 0; i < o.union_names.size(); ++i) session.fsname += (i ? "," : "") + o.union_names[i];
  }
  session.allow_other = o.allow_other;
  session.read_only = o.ro || primary_follows;
  session.extra = o.fuse_opts;
  session.threads = o.fuse_threads;
  session.read_ahead_kb = o.read_ahead_kb;
  // Kept a second, as directories' are: the filesystem tells the kernel of
  // its own changes, and the followers of each change another node made
  // as their refresh applies it (Filesystem::FollowerRefreshed).
  session.file_attr_timeout = 1.0;
  auto on_mounted = [&] {
    // Which codec path runs, and why (a GPU that is there but cannot be
    // used is worth a warning; gpu=off or no GPU at all is not).
    if (gpu)
      spdlog::info("lmcfs: mounted {} at {}; codec path: GPU batches and CPU threads (gpu={}; GPU: {})",
                   o.store, o.mountpoint, o.gpu, gpu->description());
    else if (o.gpu != "off" && GpuAvailable())
      spdlog::warn("lmcfs: mounted {} at {}; codec path: CPU, the GPU is not used ({}; GPU: {})", o.store,
                   o.mountpoint, gpu_why, GpuDescription());
    else
      spdlog::info("lmcfs: mounted {} at {}; codec path: CPU ({}; GPU: {})", o.store, o.mountpoint, gpu_why,
                   GpuDescription());
    control.SetBeforeCompact(
        control::DeadBaseGcHook(reencoded));  // lmcfs-gc re-encodes dependants of dead delta bases
    auto daemon = [&] {
      auto memory = f->MemoryCounters();
      const TrimStats ts = trimmer.Stats();
      memory.emplace_back("trims", ts.trims);
      memory.emplace_back("trim_returned_bytes", ts.returned_bytes);
      return control::DaemonStats{daemon_counters(), f->DeltaCounters(), f->GpuState(),
                                  o.dedup_per_owner ? "uid" : "all", std::move(memory)};
    };
    if (Status cs = control.Start(f->store(), o.store, getuid(), daemon, control_path); !cs.ok())
      spdlog::warn("lmcfs: no control channel for {} ({}); lmcfs-gc/-stat/-fsck cannot reach this mount",
                   o.mountpoint, cs.ToString());
    reclaimer.Start();
    trimmer.Start();
    if (report_fd >= 0) {
      Report(report_fd, 0, "");
      // The daemon keeps none of the caller's descriptors: a caller that
      // reads our output (out=$(mount.lmcfs ...), a pipe) gets EOF once the
      // parent exits. Anything written to stderr later (an abort, a
      // sanitizer) goes to the log file when there is one.
      int nul = open("/dev/null", O_RDWR);
      if (nul >= 0) {
        dup2(nul, 0);
        dup2(nul, 1);
        int err = o.log_file.empty() ? -1 : open(o.log_file.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
        dup2(err >= 0 ? err : nul, 2);
        if (err > 2) close(err);
        if (nul > 2) close(nul);
      }
    }
  };
  std::string error;
  int rc = ServeFuse(union_fs ? static_cast<FsOps*>(union_fs.get()) : fs.get(), session, on_mounted, &error);
  if (rc != 0 && rc != kFuseLoop) {  // not mounted: on_mounted did not run
    Report(report_fd, rc, error);
    return rc;
  }
  trimmer.Stop();
  reclaimer.Stop();
  control.Stop();
  followers.Stop();
  union_fs.reset();
  Status s = fs->Shutdown();
  fs.reset();
  store.reset();
  if (!s.ok()) {
    spdlog::error("lmcfs: unmount of {}: {}", o.mountpoint, s.ToString());
    return 8;
  }
  spdlog::info("lmcfs: unmounted {}", o.mountpoint);
  if (rc != 0) spdlog::error("lmcfs: {}: {}", o.mountpoint, error);
  return rc;
}

}  // namespace

int MountMain(int argc, char** argv) {
  // Belt and braces: whatever this process creates (the store's parent
  // directories, the log file) is the owner's only. The store's own files
  // get their modes explicitly (lmc/store/permissions.h).
  umask(077);
  Options o;
  if (int rc = ParseArgs(argc, argv, &o); rc >= 0) return rc;
  if (int rc = Validate(&o)) return rc;
  if (o.foreground) return Serve(o, -1);
  int p[2];
  if (pipe(p) != 0) {
    std::perror("mount.lmcfs: pipe");
    return 8;
  }
  pid_t pid = fork();
  if (pid < 0) {
    std::perror("mount.lmcfs: fork");
    return 8;
  }
  if (pid == 0) {
    close(p[0]);
    setsid();
    if (chdir("/") != 0) {
    }
    _exit(Serve(o, p[1]));
  }
  close(p[1]);
  std::string msg;
  char buf[512];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(n));
  close(p[0]);
  if (msg.empty()) {
    int status = 0;
    waitpid(pid, &status, 0);
    std::fprintf(stderr, "mount.lmcfs: the mount process died before the mount was ready\n");
    return 32;
  }
  int code = std::atoi(msg.c_str());
  if (code != 0) {
    auto sp = msg.find(' ');
    std::fprintf(stderr, "mount.lmcfs: %s\n", sp == std::string::npos ? "" : msg.c_str() + sp + 1);
    int status = 0;
    waitpid(pid, &status, 0);
    return code;
  }
  return 0;
}

}  // namespace lmc::fs
