// lmcfs-gc: compaction online (through the daemon) or offline (on an
// unmounted store), with an optional retention pass over checkpoint
// directories first.
#include <fnmatch.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common.h"
#include "lmc/text.h"
#include "lmcfs_tools.h"

namespace lmc::tools {
namespace {

using json = nlohmann::json;
namespace fsys = std::filesystem;

constexpr const char* kGcDescription =
    "Reclaims the space of deleted data in an lmcfs store: packs whose live fraction is "
    "below --threshold are rewritten without their dead records. TARGET is a mountpoint "
    "(the daemon does it while the mount keeps serving; --rate bounds the impact) or an "
    "unmounted store directory. Safe against crashes at any point.\n"
    "Retention (off unless asked): --keep-last N and/or --keep-every M select, among the "
    "checkpoint directories matching --pattern in --dir, the ones to delete before the gc; "
    "they are listed, and deleted only with --yes.";

bool ParseRate(const std::string& s, uint64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || v < 0) return false;
  std::string suf(end);
  if (!suf.empty() && (suf.back() == 's') && suf.size() >= 2 && suf[suf.size() - 2] == '/')
    suf.resize(suf.size() - 2);
  double m = 1;
  if (suf.empty() || suf == "B")
    m = 1;
  else if (suf == "K" || suf == "KiB")
    m = 1024.0;
  else if (suf == "M" || suf == "MiB")
    m = 1024.0 * 1024;
  else if (suf == "G" || suf == "GiB")
    m = 1024.0 * 1024 * 1024;
  else
    return false;
  *out = static_cast<uint64_t>(v * m);
  return true;
}

// The checkpoint directories to delete: sorted in version order (step-10 <
// step-9 is wrong, so strverscmp), keep the last N and every M-th (by
// position from the first), delete the rest. Neither option: nothing.
std::vector<std::string> RetentionVictims(const std::vector<std::string>& names, int keep_last,
                                          int keep_every) {
  std::vector<std::string> v = names;
  std::sort(v.begin(), v.end(), [](const std::string& a, const std::string& b) {
    return ::strverscmp(a.c_str(), b.c_str()) < 0;
  });
  std::vector<std::string> victims;
  if (keep_last <= 0 && keep_every <= 0) return victims;
  const size_t n = v.size();
  for (size_t i = 0; i < n; i++) {
    bool keep = false;
    if (keep_last > 0 && i + static_cast<size_t>(keep_last) >= n) keep = true;
    if (keep_every > 0 && i % static_cast<size_t>(keep_every) == 0) keep = true;
    if (keep_last <= 0 && keep_every > 0 && i + 1 == n) keep = true;  // never the newest
    if (!keep) victims.push_back(v[i]);
  }
  return victims;
}

// Deletes `p` and everything under it. In a union mount (lmc/fs/union_fs.h)
// the entries of stores other nodes write are read-only here (EROFS): they
// are left for those nodes' own lmcfs-gc and counted in *left.
bool RemoveTree(const fsys::path& p, uint64_t* left, std::string* error) {
  struct stat st;
  if (::lstat(p.c_str(), &st) != 0) {
    if (errno == ENOENT) return true;
    *error = p.string() + ": " + std::strerror(errno);
    return false;
  }
  if (S_ISDIR(st.st_mode)) {
    std::error_code ec;
    std::vector<fsys::path> children;
    for (const auto& e : fsys::directory_iterator(p, ec)) children.push_back(e.path());
    if (ec) {
      *error = p.string() + ": " + ec.message();
      return false;
    }
    const uint64_t before = *left;
    for (const auto& c : children)
      if (!RemoveTree(c, left, error)) return false;
    // A directory that still holds what other nodes write stays too.
    if (::rmdir(p.c_str()) == 0) return true;
    if (errno == EROFS || (errno == ENOTEMPTY && *left > before)) {
      ++*left;
      return true;
    }
    *error = p.string() + ": " + std::strerror(errno);
    return false;
  }
  if (::unlink(p.c_str()) == 0) return true;
  if (errno == EROFS) {
    ++*left;
    return true;
  }
  *error = p.string() + ": " + std::strerror(errno);
  return false;
}

}  // namespace

int GcMain(int argc, char** argv, std::ostream& out, std::ostream& err) {
  CLI::App app(kGcDescription, "lmcfs-gc");
  app.set_version_flag("-V,--version", store::VersionText("lmcfs-gc"));
  std::string target, rate_s, pattern, dir;
  double threshold = 0.5;
  bool dry_run = false, as_json = false, quiet = false, yes = false;
  int keep_last = 0, keep_every = 0;
  app.add_option("TARGET", target, "lmcfs mountpoint or unmounted store directory")->required();
  app.add_flag("-n,--dry-run", dry_run, "report what would be reclaimed, change nothing");
  app.add_option("--threshold", threshold, "rewrite packs whose live fraction is below this (default 0.5)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--rate", rate_s,
                 "copy at most this many bytes per second on average (e.g. 100M); default unlimited");
  app.add_flag("--json", as_json, "one JSON document (docs/FORMAT.md, \"Control protocol\", gc)");
  app.add_flag("-q,--quiet", quiet, "no progress bar");
  app.add_option("--keep-last", keep_last, "retention: keep the N newest checkpoint directories");
  app.add_option("--keep-every", keep_every, "retention: also keep every M-th (1st, M+1-th, ...)");
  app.add_option("--pattern", pattern, "retention: glob of checkpoint directory names (e.g. 'step-*')");
  app.add_option("--dir", dir,
                 "retention: directory holding the checkpoints (default: TARGET, a mountpoint)");
  app.add_flag("--yes", yes, "retention: really delete the listed directories");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e, out, err);
    return rc == 0 ? 0 : 2;
  }
  uint64_t rate = 0;
  if (!rate_s.empty() && !ParseRate(rate_s, &rate)) {
    err << "lmcfs-gc: --rate " << rate_s << ": expected bytes per second like 50M or 1G\n";
    return 2;
  }
  auto t = ResolveTarget(target);
  if (!t.ok()) {
    err << "lmcfs-gc: " << t.status().message() << "\n";
    return 1;
  }

  json retention;
  if (keep_last > 0 || keep_every > 0) {
    if (pattern.empty()) {
      err << "lmcfs-gc: --keep-last/--keep-every need --pattern (the checkpoint directories' names)\n";
      return 2;
    }
    if (!t->online && dir.empty()) {
      err << "lmcfs-gc: retention deletes checkpoints through a mount: give a mountpoint as TARGET or "
             "--dir\n";
      return 2;
    }
    const std::string where = dir.empty() ? t->mountpoint : dir;
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : fsys::directory_iterator(where, ec)) {
      const std::string n = e.path().filename().string();
      // Directories only: a symbolic link that matches (a "latest" link
      // named like a checkpoint) is neither counted among those kept nor
      // deleted; an entry that cannot be examined is not matched.
      std::error_code sec;
      const bool dir = e.is_directory(sec) && !e.is_symlink(sec) && !sec;
      if (dir && ::fnmatch(pattern.c_str(), n.c_str(), 0) == 0) names.push_back(n);
    }
    if (ec) {
      err << "lmcfs-gc: cannot list " << where << ": " << ec.message() << "\n";
      return 1;
    }
    const auto victims = RetentionVictims(names, keep_last, keep_every);
    retention = {
        {"dir", where}, {"matched", names.size()}, {"delete", victims}, {"deleted", yes && !dry_run}};
    if (!as_json) {
      out << (yes && !dry_run ? "deleting" : "would delete") << " " << victims.size() << " of "
          << names.size() << " checkpoint directories in " << where << ":\n";
      for (const auto& v : victims) out << "  " << EscapeBytes(v, /*controls=*/true) << "\n";
      if (!yes && !victims.empty()) out << "(nothing deleted: add --yes to delete them)\n";
    }
    uint64_t left = 0;
    if (yes && !dry_run) {
      for (const auto& v : victims) {
        std::string error;
        if (!RemoveTree(fsys::path(where) / v, &left, &error)) {
          err << "lmcfs-gc: cannot delete " << error << "\n";
          return 1;
        }
      }
    }
    // A union: this node rotates the store it writes; the others' parts of
    // the same checkpoints are their nodes' to rotate.
    if (t->online) {
      const json u = UnionReport(t->mountpoint);
      if (!u.is_null()) {
        json rotated = json::array(), not_here = json::array();
        for (const auto& m : u["stores"])
          (m["writable"].get<bool>() ? rotated : not_here).push_back(m["name"]);
        retention["stores_rotated"] = rotated;
        retention["stores_read_only_here"] = not_here;
        retention["entries_left"] = left;
        if (!as_json && !not_here.empty()) {
          out << "union: rotated "
              << (rotated.empty() ? std::string("no store") : fs::control::DumpJson(rotated))
              << "; read-only here (each rotated by lmcfs-gc on the node that writes it): "
              << fs::control::DumpJson(not_here);
          if (left) out << "; " << left << " of their entries left";
          out << "\n";
        }
      }
    }
  }

  Progress bar(err, "lmcfs-gc: compacting packs", quiet || as_json);
  auto on_event = [&](const std::string& e) {
    json j = json::parse(e, nullptr, false);
    if (j.is_object() && j.value("event", "") == "progress")
      bar.Update(j.value("done", 0ull), j.value("total", 0ull), j.value("bytes_copied", 0ull));
  };
  std::string doc_text;
  if (t->online) {
    auto r =
        Ask(*t,
            fs::control::DumpJson(json{
                {"op", "gc"}, {"threshold", threshold}, {"rate_bytes_per_s", rate}, {"dry_run", dry_run}}),
            on_event);
    if (!r.ok()) {
      bar.Finish();
      err << "lmcfs-gc: " << r.status().message() << "\n";
      return 1;
    }
    doc_text = *r;
  } else {
    auto st = OpenOffline(t->store, "lmcfs-gc");
    if (!st.ok()) {
      err << "lmcfs-gc: " << st.status().message() << "\n";
      return 1;
    }
    fs::control::GcOptions o;
    o.threshold = threshold;
    o.rate_bytes_per_s = rate;
    o.dry_run = dry_run;
    // As the daemon does: dependants of dead delta bases re-encoded, then the
    // files using them take the new frame lengths (st_blocks).
    store::Store* s = st->get();
    auto refresh = [s](const std::vector<store::ChunkKey>& keys) { return fs::RefreshStoredBytes(s, keys); };
    // What a gc that a crash cut short left to refresh, first.
    if (!dry_run) {
      if (auto left = fs::RefreshLeftOver(s, refresh); !left.ok())
        err << "lmcfs-gc: " << t->store << ": refreshing the stored bytes an earlier gc left failed ("
            << left.status().message() << "); lmcfs-fsck --repair sets them\n";
    }
    o.before_compact = fs::control::DeadBaseGcHook(refresh);
    auto r = fs::control::RunGc(**st, o, on_event);
    if (!r.ok()) {
      bar.Finish();
      err << "lmcfs-gc: " << t->store << ": " << r.status().message() << "\n";
      return 1;
    }
    doc_text = *r;
  }
  bar.Finish();
  json doc = json::parse(doc_text);
  doc["store"] = t->store;
  doc["online"] = t->online;
  if (!retention.is_null()) doc["retention"] = retention;
  if (as_json) {
    out << fs::control::DumpJson(doc, 2) << "\n";
    return 0;
  }
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.2f s", doc["seconds"].get<double>());
  if (dry_run) {
    out << "dry run: " << doc["candidates"].size() << " of " << doc["packs_examined"].get<uint64_t>()
        << " sealed packs below live fraction " << threshold << " would be rewritten; the store holds "
        << HumanSize(doc["dead_bytes"]) << " of dead data in " << HumanSize(doc["pack_bytes_before"])
        << " of packs\n";
  } else {
    out << "reclaimed " << HumanSize(doc["bytes_reclaimed"]) << " (" << doc["bytes_reclaimed"].get<uint64_t>()
        << " bytes): " << doc["packs_rewritten"].get<uint64_t>() << " packs rewritten, "
        << HumanSize(doc["bytes_copied"]) << " of live data copied, in " << secs << "; packs now "
        << HumanSize(doc["pack_bytes_after"]) << "\n";
  }
  return 0;
}

}  // namespace lmc::tools
