// lmcfs-fsck: the store's verification (Store::Fsck) and the filesystem's
// own checks, with the files any corruption affects; fsck(8) exit codes.
#include <CLI/CLI.hpp>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>

#include "common.h"
#include "lmc/text.h"
#include "lmcfs_tools.h"

namespace lmc::tools {
namespace {

using json = nlohmann::json;

constexpr const char* kFsckDescription =
    "Verifies an lmcfs store: every pack and record checksum (with --deep also every chunk "
    "decoded and checked against its SHA-256 key), the index, reference counts, delta bases, "
    "and the filesystem's directory entries, link counts, extents and stored sizes. Lists the files any "
    "corruption affects, and the files whose stored size (st_blocks) is out of date with their chunks "
    "(data intact; not counted as an error). TARGET is an unmounted store directory, or a mountpoint "
    "(verify only; commits wait only while the index is checked). --repair (store directory only) fixes "
    "counts, drops leaked chunks and orphan pack data, removes entries that point nowhere, sets stored "
    "sizes, and writes the metadata of what it removed to a quarantine report first.\n"
    "Exit codes (fsck(8)): 0 clean, 1 errors corrected, 4 errors left uncorrected, "
    "8 operational error, 16 usage error, 32 cancelled.";

void PrintReport(const json& r, std::ostream& out) {
  const json& s = r["store"];
  out << "checked " << s["chunks_checked"].get<uint64_t>() << " chunks (" << HumanSize(r["verified_bytes"])
      << " stored) in " << r["verify_seconds"].get<double>() << " s";
  const double vs = r["verify_seconds"].get<double>();
  if (vs > 0) out << ", " << HumanSize(static_cast<uint64_t>(r["verified_bytes"].get<double>() / vs)) << "/s";
  out << "; " << r["tree"]["inodes"].get<uint64_t>() << " inodes, " << r["tree"]["dirents"].get<uint64_t>()
      << " directory entries, " << r["tree"]["extents"].get<uint64_t>() << " extents\n";
  for (const auto& m : s["messages"]) out << "store: " << m.get<std::string>() << "\n";
  for (const auto& p : r["tree"]["problems"])
    out << "filesystem: " << p["message"].get<std::string>()
        << (p["repaired"].get<bool>() ? " (repaired)" : "") << "\n";
  // Accounting, not data: no problem counted, so the exit code stays.
  const json& stale = r["tree"]["stale_stored"];
  for (const auto& s : stale)
    out << "filesystem: " << EscapeBytes(s["path"].get<std::string>(), true) << " (inode "
        << s["ino"].get<uint64_t>() << ") shows " << s["recorded"].get<uint64_t>()
        << " stored bytes (st_blocks), its chunks hold " << s["actual"].get<uint64_t>()
        << (s["repaired"].get<bool>() ? " (repaired)" : "") << "\n";
  if (!stale.empty() && !stale[0]["repaired"].get<bool>())
    out << "filesystem: " << stale.size() << " file" << (stale.size() == 1 ? "'s" : "s'")
        << " stored sizes are out of date (a re-encoding cut short by a crash); their data is "
           "intact; "
        << (r["online"].get<bool>() ? "unmount and run lmcfs-fsck --repair STORE to set them"
                                    : "lmcfs-fsck --repair sets them")
        << "\n";
  if (!r["affected_files"].empty()) {
    out << "files affected by corruption (" << r["affected_files"].size() << "):\n";
    for (const auto& f : r["affected_files"]) out << "  " << EscapeBytes(f.get<std::string>(), true) << "\n";
  }
  if (!r["quarantine"].get<std::string>().empty())
    out << "quarantine report: " << r["quarantine"].get<std::string>() << "\n";
  const uint64_t errors = r["errors"], fixed = r["fixed"];
  if (errors == 0) {
    out << "clean\n";
  } else {
    out << errors << " problem" << (errors == 1 ? "" : "s") << " found, " << fixed << " repaired";
    if (fixed < errors)
      out << (r["repair"].get<bool>()
                  ? "; the rest need the damaged data back (restore the files listed "
                    "from a copy)"
                  : (r["online"].get<bool>() ? "; unmount and run lmcfs-fsck --repair STORE"
                                             : "; run again with --repair"));
    out << "\n";
  }
}

// What to do when the store's index is damaged (Store::Open and Fsck say
// "index ... is damaged" when RocksDB's checksums of its own files fail):
// a journaled store's message says how it is rebuilt; for a store without
// a journal, fsck cannot list or repair what the damaged part held.
std::string IndexDamageHint(const Status& st) {
  if (!st.IsCorruption() || st.message().find(" is damaged") == std::string::npos) return "";
  if (st.message().find("rebuilds the index") != std::string::npos) return "";
  return "\nlmcfs-fsck: lmcfs-fsck cannot rebuild a damaged index, nor tell which files the damaged part "
         "described; the pack files are untouched. Copy out the files that still read back through a "
         "mount, or restore the whole store from a copy taken while it was unmounted";
}

}  // namespace

int FsckMain(int argc, char** argv, std::ostream& out, std::ostream& err) {
  CLI::App app(kFsckDescription, "lmcfs-fsck");
  app.set_version_flag("-V,--version", store::VersionText("lmcfs-fsck"));
  std::string target, quarantine;
  bool repair = false, as_json = false, quiet = false, deep = false;
  app.add_option("TARGET", target, "store directory (or mountpoint: verify only)")->required();
  app.add_flag("--repair,-y", repair, "repair what can be repaired without touching good data");
  app.add_option("--quarantine", quarantine,
                 "where --repair writes the removed records' metadata (default: STORE/quarantine-TIME.json)");
  app.add_flag("--deep", deep,
               "also decode every chunk and check its SHA-256 against its key (slower: the default "
               "verifies every record's checksum, which finds any changed stored byte)");
  app.add_flag("--json", as_json, "one JSON document (docs/FORMAT.md, \"Control protocol\", fsck)");
  app.add_flag("-q,--quiet", quiet, "no progress bar");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e, out, err);
    return rc == 0 ? store::kFsckOk : store::kFsckUsage;
  }
  // A target that cannot be opened is an operational error, as for
  // e2fsck on a missing device; 16 is for the command line itself.
  auto t = ResolveTarget(target);
  if (!t.ok()) {
    err << "lmcfs-fsck: " << t.status().message() << "\n";
    return store::kFsckOperationalError;
  }
  Progress bar(err, "lmcfs-fsck: verifying chunks", quiet || as_json);
  auto on_event = [&](const std::string& e) {
    json j = json::parse(e, nullptr, false);
    if (j.is_object() && j.value("event", "") == "progress")
      bar.Update(j.value("done", 0ull), j.value("total", 0ull));
  };
  std::string doc_text, rebuilt;
  std::vector<std::string> open_repairs;
  if (t->online) {
    if (repair) {
      err << "lmcfs-fsck: " << t->store << " is mounted at " << t->mountpoint
          << ": repair needs the store unmounted (umount " << t->mountpoint << ", then lmcfs-fsck --repair "
          << t->store << "); verifying only\n";
    }
    auto r = Ask(*t, fs::control::DumpJson(json{{"op", "fsck"}, {"deep", deep}}), on_event);
    if (!r.ok()) {
      err << "lmcfs-fsck: " << r.status().message() << "\n";
      return store::kFsckOperationalError;
    }
    doc_text = *r;
  } else {
    auto st = OpenOffline(t->store, "lmcfs-fsck", repair);
    if (!st.ok()) {
      err << "lmcfs-fsck: " << st.status().message() << IndexDamageHint(st.status()) << "\n";
      return store::kFsckOperationalError;
    }
    fs::control::FsckRunOptions o;
    if (repair) {
      // Before anything is repaired from the index: if it differs from its
      // journal (entries RocksDB lost without an error), make it again
      // from the journal. A store without a journal: Unsupported, skipped.
      auto diff = (*st)->CompareIndexWithJournal();
      o.journal_compared = diff.ok();
      if (diff.ok() && !diff->empty()) {
        const std::vector<std::string> before = (*st)->OpenRepairs();
        st->reset();
        st = OpenOffline(t->store, "lmcfs-fsck", true, true);
        if (!st.ok()) {
          err << "lmcfs-fsck: rebuilding the index of " << t->store
              << " from its journal: " << st.status().message() << "\n";
          return store::kFsckOperationalError;
        }
        for (const std::string& d : *diff) err << "lmcfs-fsck: " << d << "\n";
        open_repairs = before;
      } else if (!diff.ok() && diff.status().code() != Code::kUnsupported && !diff.status().IsCorruption()) {
        err << "lmcfs-fsck: comparing the index of " << t->store
            << " with its journal: " << diff.status().message() << "\n";
        return store::kFsckOperationalError;
      }
    }
    o.repair = repair;
    o.deep = deep;
    if (repair) {
      if (quarantine.empty()) {
        char ts[32];
        const std::time_t now = std::time(nullptr);
        std::strftime(ts, sizeof ts, "%Y%m%dT%H%M%SZ", std::gmtime(&now));
        quarantine = t->store + "/quarantine-" + ts + ".json";
      }
      o.quarantine_path = quarantine;
    }
    auto r = fs::control::RunFsck(**st, o, [&](const std::string& e) { on_event(e); });
    if (!r.ok()) {
      bar.Finish();
      err << "lmcfs-fsck: " << t->store << ": " << r.status().message() << IndexDamageHint(r.status())
          << "\n";
      return store::FsckExitCode(r.status());
    }
    doc_text = *r;
    rebuilt = (*st)->RebuiltIndex();
    for (const std::string& m : (*st)->OpenRepairs()) open_repairs.push_back(m);
  }
  bar.Finish();
  json doc = json::parse(doc_text);
  // What the open repaired (an index rebuilt from the journal, a journal
  // written again from the index): problems found and repaired, so the
  // exit code is 1 at least.
  for (const std::string& m : open_repairs) {
    doc["store"]["messages"].push_back(m + " (repaired)");
    doc["errors"] = doc["errors"].get<uint64_t>() + 1;
    doc["fixed"] = doc["fixed"].get<uint64_t>() + 1;
    if (doc["exit_code"].get<int>() == store::kFsckOk)
      doc["exit_code"] = static_cast<int>(store::kFsckCorrected);
  }
  if (!rebuilt.empty()) doc["index_rebuilt_from_journal"] = rebuilt;
  doc["store_dir"] = t->store;
  if (as_json) {
    out << fs::control::DumpJson(doc, 2) << "\n";
  } else {
    PrintReport(doc, out);
  }
  return doc["exit_code"].get<int>();
}

}  // namespace lmc::tools
