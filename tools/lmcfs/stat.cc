// lmcfs-stat: space figures per file and directory, store totals and, on a
// mount, the daemon's counters. The figures are defined in
// docs/ARCHITECTURE.md, "Operating tools".
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "common.h"
#include "lmc/text.h"
#include "lmcfs_tools.h"

namespace lmc::tools {
namespace {

using json = nlohmann::json;

constexpr const char* kStatDescription =
    "Shows how much space files on lmcfs take: logical bytes (what `du --apparent-size` "
    "says), stored bytes (what `du` says), the ratio logical/stored, and what was saved by "
    "the codec, by deltas against earlier checkpoints (an estimate) and by deduplication; "
    "per file and per directory (a directory sums its subtree, hard links once, as du does), "
    "then the store's totals. "
    "TARGET is a mountpoint (asks the daemon) or an unmounted store directory. Exit code 0, "
    "or 1 when a PATH does not exist (the others are shown) or on an error.";

std::string Size(const json& v, bool bytes) {
  const int64_t n = v.get<int64_t>();  // savings may be negative (codec overhead)
  const uint64_t mag = n < 0 ? static_cast<uint64_t>(-n) : static_cast<uint64_t>(n);
  return (n < 0 ? "-" : "") + (bytes ? std::to_string(mag) : HumanSize(mag));
}

std::string Ratio(double r) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2fx", r);
  return b;
}

// The daemon's memory by part (docs/FORMAT.md, "Control protocol", stat:
// daemon.memory); parts may share buffers (a chunk just written is cached
// and a delta base at once).
void PrintMemory(const json& m, bool bytes, std::ostream& out) {
  auto of = [&](const char* held, const char* cap) {
    return Size(m.value(held, json(0)), bytes) + " of " + Size(m.value(cap, json(0)), bytes);
  };
  out << "  memory: resident " << Size(m.value("resident_bytes", json(0)), bytes) << " (peak "
      << Size(m.value("peak_resident_bytes", json(0)), bytes) << "); writes in flight "
      << of("write_inflight_bytes", "write_budget_bytes") << ", frames at the committer "
      << of("commit_queue_bytes", "commit_queue_limit") << ", write blocks "
      << Size(m.value("write_block_bytes", json(0)), bytes) << " ("
      << Size(m.value("write_block_pool_bytes", json(0)), bytes) << " idle), chunk cache "
      << of("chunk_cache_bytes", "chunk_cache_capacity") << ", bases of the next save "
      << of("delta_cache_bytes", "delta_cache_capacity") << ", decoded delta bases "
      << of("base_cache_bytes", "base_cache_capacity") << ", idle frame buffers "
      << of("frame_pool_bytes", "frame_pool_capacity");
  if (m.contains("inodes_cached")) out << ", " << m["inodes_cached"].get<uint64_t>() << " inodes cached";
  out << "\n";
  out << "  index memory: memtables " << Size(m.value("index_memtable_bytes", json(0)), bytes)
      << ", table readers " << Size(m.value("index_table_reader_bytes", json(0)), bytes) << ", block caches "
      << of("index_block_cache_bytes", "index_block_cache_capacity") << "\n";
  if (m.contains("trims"))
    out << "  memory given back when quiet: " << Size(m["trim_returned_bytes"], bytes) << " in "
        << m["trims"].get<uint64_t>() << " trims\n";
}

// The codec paths (docs/ARCHITECTURE.md, "GPU codec in the mount"): what
// each encoded and decoded, and the GPU's state.
void PrintCodec(const json& d, bool bytes, std::ostream& out) {
  auto n = [&](const char* k) { return d.value(k, uint64_t{0}); };
  auto sz = [&](const char* k) { return Size(d.value(k, json(0)), bytes); };
  out << "  codec: CPU encoded " << sz("cpu_encode_bytes") << " in " << n("cpu_encode_chunks")
      << " chunks, GPU encoded " << sz("gpu_encode_bytes") << " in " << n("gpu_encode_chunks")
      << " chunks; reads: CPU decoded " << sz("cpu_decode_bytes") << " in " << n("cpu_decode_chunks")
      << " chunks, GPU decoded " << sz("gpu_decode_bytes") << " in " << n("gpu_decode_chunks") << " chunks\n";
  if (n("matched_chunks"))
    out << "  already stored: " << sz("matched_bytes") << " in " << n("matched_chunks")
        << " chunks (written, found in the store byte for byte, not encoded)\n";
  out << "  GPU: " << d.value("gpu", std::string("none")) << "; batches: " << n("gpu_batches");
  if (n("gpu_failed_batches"))
    out << ", failed: " << n("gpu_failed_batches") << " (" << n("gpu_fallback_chunks")
        << " chunks redone on the CPU)";
  if (n("gpu_verify_failures"))
    out << ", frames that did not decode back on the GPU: " << n("gpu_verify_failures")
        << " (encoded on the CPU instead)";
  out << "\n";
  // Where the pipelines spent their time since the mount (FsCounters' *_ns).
  if (!d.contains("write_budget_wait_ns")) return;  // a daemon of an older version
  auto s = [&](const char* k) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f s", static_cast<double>(n(k)) / 1e9);
    return std::string(b);
  };
  out << "  waits: writers " << s("write_budget_wait_ns") << " for the write budget (encoders behind), "
      << s("commit_wait_ns") << " for commits\n";
  if (n("gpu_batches") || n("gpu_failed_batches"))
    out << "  GPU time: device encode calls " << s("gpu_encode_call_ns") << ", decode calls "
        << s("gpu_decode_call_ns") << "; feeder idle " << s("gpu_feeder_idle_ns") << ", preparing "
        << s("gpu_feeder_prepare_ns") << ", finishing " << s("gpu_feeder_finish_ns")
        << "; read-ahead batches " << s("gpu_read_batch_ns") << "\n";
}

void PrintTable(const json& doc, const std::string& sort, bool reverse, bool bytes, bool files_only,
                std::ostream& out) {
  std::vector<json> rows(doc["entries"].begin(), doc["entries"].end());
  if (files_only)
    rows.erase(std::remove_if(rows.begin(), rows.end(), [](const json& e) { return e["type"] == "dir"; }),
               rows.end());
  auto key = [&](const json& e) -> double {
    if (sort == "size") return e["logical"].get<double>();
    if (sort == "stored") return e["stored"].get<double>();
    return e["ratio"].get<double>();
  };
  if (sort == "name") {
    std::stable_sort(rows.begin(), rows.end(), [](const json& a, const json& b) {
      return a["path"].get<std::string>() < b["path"].get<std::string>();
    });
  } else {
    // Largest first; ties by name.
    std::stable_sort(rows.begin(), rows.end(), [&](const json& a, const json& b) {
      if (key(a) != key(b)) return key(a) > key(b);
      return a["path"].get<std::string>() < b["path"].get<std::string>();
    });
  }
  if (reverse) std::reverse(rows.begin(), rows.end());
  char line[512];
  std::snprintf(line, sizeof line, "%12s %12s %8s %12s %12s %12s  %s\n", "LOGICAL", "STORED", "RATIO",
                "CODEC", "DELTA", "DEDUP", "PATH");
  out << line;
  for (const auto& e : rows) {
    // One line a name, whatever it holds: a newline or other control
    // character in it is written as \xNN, as bytes that are not UTF-8
    // already are (a path is as long as it is: not through the buffer).
    std::string path = EscapeBytes(e["path"].get<std::string>(), /*controls=*/true);
    if (e["type"] == "dir" && path != "/") path += "/";
    std::snprintf(line, sizeof line, "%12s %12s %8s %12s %12s %12s  ", Size(e["logical"], bytes).c_str(),
                  Size(e["stored"], bytes).c_str(), Ratio(e["ratio"]).c_str(),
                  Size(e["saved_codec"], bytes).c_str(), Size(e["saved_delta"], bytes).c_str(),
                  Size(e["saved_dedup"], bytes).c_str());
    out << line << path << "\n";
  }
  const json& t = doc["totals"];
  out << "\nstore " << doc.value("store", std::string()) << "\n";
  out << "  files " << t["files"].get<uint64_t>() << ", directories " << t["dirs"].get<uint64_t>()
      << ", inodes " << t["inodes"].get<uint64_t>() << "\n";
  out << "  logical " << Size(t["logical"], bytes) << ", stored " << Size(t["stored"], bytes) << " (ratio "
      << Ratio(t["ratio"]) << "), after dedup " << Size(t["charged"], bytes) << "\n";
  out << "  saved: codec " << Size(t["saved_codec"], bytes) << ", delta " << Size(t["saved_delta"], bytes)
      << " (" << t["delta_chunks"].get<uint64_t>() << " delta chunks), derived "
      << Size(t.value("saved_derived", json(0)), bytes) << " (fp32 masters against their bf16 twins), dedup "
      << Size(t["saved_dedup"], bytes) << "\n";
  char lf[32];
  std::snprintf(lf, sizeof lf, "%.1f%%", 100.0 * t["live_fraction"].get<double>());
  out << "  packs " << t["packs"].get<uint64_t>() << ", pack bytes " << Size(t["pack_bytes"], bytes)
      << ", live " << Size(t["live_bytes"], bytes) << " (" << lf << "), dead "
      << Size(t.value("dead_bytes", json(0)), bytes);
  if (t.contains("pack_disk_bytes"))
    out << " (on disk: packs " << Size(t["pack_disk_bytes"], bytes) << ", dead "
        << Size(t["dead_disk_bytes"], bytes) << ")";
  if (t.contains("index_bytes")) out << ", index " << Size(t["index_bytes"], bytes);
  out << "\n";
  if (t.contains("disk_bytes")) out << "  on disk " << Size(t["disk_bytes"], bytes) << " (store directory)\n";
  if (doc.contains("daemon")) {
    const json& d = doc["daemon"];
    const double up = std::max(d["uptime_s"].get<double>(), 1e-9);
    const uint64_t hits = d["cache_hits"], misses = d["cache_misses"];
    char hr[32];
    std::snprintf(
        hr, sizeof hr, "%.1f%%",
        hits + misses ? 100.0 * static_cast<double>(hits) / static_cast<double>(hits + misses) : 0.0);
    out << "daemon (up " << static_cast<uint64_t>(up) << " s)\n";
    out << "  written " << Size(d["write_bytes"], bytes) << " in " << d["write_calls"].get<uint64_t>()
        << " calls (" << HumanSize(static_cast<uint64_t>(d["write_bytes"].get<double>() / up))
        << "/s average), " << d["chunks_written"].get<uint64_t>() << " chunks encoded\n";
    out << "  cache hits " << hits << ", misses " << misses << " (hit rate " << hr << ")\n";
    out << "  I/O errors (EIO) " << d["eio"].get<uint64_t>() << ", corrupt reads "
        << d["store_corruptions"].get<uint64_t>() << "\n";
    if (d.contains("dedup"))
      out << "  dedup: " << d["dedup"].get<std::string>()
          << (d["dedup"] == "uid" ? " (chunks shared, and deltas taken, only among files of one owner)\n"
                                  : " (chunks shared across all files of the store)\n");
    if (d.contains("delta") && d["delta"].contains("rebased")) {
      const json& x = d["delta"];
      out << "  deltas: " << x.value("delta_chunks", uint64_t{0}) << " written as deltas, "
          << x.value("rebased", uint64_t{0}) << " prior versions re-encoded as deltas ("
          << x.value("rebase_pending", uint64_t{0}) << " pending, "
          << x.value("rebase_keyframes", uint64_t{0}) << " kept as keyframes, "
          << x.value("rebase_errors", uint64_t{0}) << " errors)";
      if (x.contains("paired"))
        out << "; " << x["paired"].get<uint64_t>() << " fp32 chunks stored against their bf16 twins";
      out << "\n";
    }
    if (d.contains("reclaim_passes")) {
      const int64_t last = d["reclaim_last_pass_unix"].get<int64_t>();
      out << "  reclamation: " << d["reclaim_passes"].get<uint64_t>() << " passes ("
          << d["reclaim_passes_stopped"].get<uint64_t>() << " stopped for foreground work, "
          << d["reclaim_errors"].get<uint64_t>() << " failed), gave back "
          << Size(d["reclaim_bytes_reclaimed"], bytes) << ", copied "
          << Size(d["reclaim_bytes_copied"], bytes) << ", "
          << d["reclaim_dead_bases_rewritten"].get<uint64_t>() << " dead-base dependants rewritten, "
          << d["reclaim_ms"].get<uint64_t>() / 1000.0 << " s";
      if (last > 0) out << ", last pass " << static_cast<int64_t>(std::time(nullptr)) - last << " s ago";
      if (d.value("read_only", uint64_t{0}))
        out << " (a follower: the mount that writes the store reclaims)";
      else if (!d.value("reclaim_enabled", uint64_t{1}))
        out << " (gc=off)";
      out << "\n";
    }
    if (d.contains("store_punched_bytes"))
      out << "  holes punched: " << Size(d["store_punched_bytes"], bytes) << " of dead records given back in "
          << d["store_punched_holes"].get<uint64_t>() << " holes, without copying\n";
    if (d.contains("write_amplification")) {
      char wa[32];
      std::snprintf(wa, sizeof wa, "%.3f", d["write_amplification"].get<double>());
      out << "  written to disk: packs " << Size(d["store_pack_bytes_written"], bytes) << ", index "
          << Size(d["store_index_bytes_written"], bytes) << " (write amplification " << wa
          << " bytes per byte written)\n";
    }
    if (d.contains("store_base_cache_hits"))
      out << "  decoded delta bases: " << d["store_base_cache_hits"].get<uint64_t>() << " from the cache, "
          << d["store_base_cache_misses"].get<uint64_t>() << " decoded\n";
    if (d.contains("cpu_encode_chunks")) PrintCodec(d, bytes, out);
    if (d.contains("memory")) PrintMemory(d["memory"], bytes, out);
  }
}

}  // namespace

void PrintStat(const std::string& doc, bool bytes, std::ostream& out) {
  PrintTable(json::parse(doc), "name", false, bytes, false, out);
}

int StatMain(int argc, char** argv, std::ostream& out, std::ostream& err) {
  CLI::App app(kStatDescription, "lmcfs-stat");
  app.set_version_flag("-V,--version", store::VersionText("lmcfs-stat"));
  std::string target, sort = "name";
  std::vector<std::string> paths;
  bool as_json = false, bytes = false, reverse = false, files_only = false;
  app.add_option("TARGET", target, "lmcfs mountpoint or store directory")->required();
  app.add_option("PATH", paths, "files or directories to show (default: everything)");
  app.add_option("--sort", sort, "order: size (logical), stored, ratio, or name (default)")
      ->check(CLI::IsMember({"size", "stored", "ratio", "name"}));
  app.add_flag("-r,--reverse", reverse, "reverse the order");
  app.add_flag("--files", files_only, "list files only, not directories");
  app.add_flag("-b,--bytes", bytes, "exact byte counts instead of human-readable sizes");
  app.add_flag("--json", as_json, "one JSON document (docs/FORMAT.md, \"Control protocol\", stat)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e, out, err);
    return rc == 0 ? 0 : 2;
  }
  auto t = ResolveTarget(target);
  if (!t.ok()) {
    err << "lmcfs-stat: " << t.status().message() << "\n";
    return 1;
  }
  const std::vector<std::string> fs_paths = FsPaths(*t, paths);
  std::string doc_text;
  if (t->online) {
    json names = json::array();
    for (const auto& p : fs_paths) names.push_back(fs::control::NameToJson(p));
    auto r = Ask(*t, fs::control::DumpJson(json{{"op", "stat"}, {"paths", names}}), {});
    if (!r.ok()) {
      err << "lmcfs-stat: " << r.status().message() << "\n";
      return 1;
    }
    doc_text = *r;
  } else {
    auto st = OpenOffline(t->store, "lmcfs-stat");
    if (!st.ok()) {
      err << "lmcfs-stat: " << st.status().message() << "\n";
      return 1;
    }
    auto r = fs::control::RunStat(**st, t->store, fs_paths, nullptr);
    if (!r.ok()) {
      err << "lmcfs-stat: " << t->store << ": " << r.status().message() << "\n";
      return 1;
    }
    doc_text = *r;
  }
  json doc = json::parse(doc_text);
  doc["store"] = t->store;
  if (t->online) doc["mountpoint"] = t->mountpoint;
  // A union: the figures are the writable (first) store's; what the union
  // holds and hides is said after them.
  const json u = t->online ? UnionReport(t->mountpoint) : json();
  if (!u.is_null()) doc["union"] = u;
  // A name that is not there is said, as ls and du say it, and the rest
  // shown; the exit code is then 1.
  const json missing = doc.value("not_found", json::array());
  for (const auto& m : missing)
    err << "lmcfs-stat: cannot show '" << EscapeBytes(m.get<std::string>(), true)
        << "': no such file or directory in the filesystem\n";
  const int rc = missing.empty() ? 0 : 1;
  if (as_json) {
    out << fs::control::DumpJson(doc, 2) << "\n";
  } else if (!missing.empty() && doc["entries"].empty()) {
    // Nothing asked for exists: no table of nothing.
  } else {
    PrintTable(doc, sort, reverse, bytes, files_only, out);
    if (!u.is_null()) {
      out << "\nunion of";
      for (const auto& m : u["stores"])
        out << " " << m["name"].get<std::string>() << (m["writable"].get<bool>() ? " (rw)" : " (ro)");
      out << " (the figures above are " << u["stores"][0]["name"].get<std::string>() << "'s)\n";
      out << "  " << u["shadowed"].get<uint64_t>() << " names held by more than one store (the first shown)";
      out << (u["hidden"].empty() ? "\n" : ":\n");
      for (const auto& h : u["hidden"]) out << "    " << EscapeBytes(h.get<std::string>(), true) << "\n";
    }
  }
  return rc;
}

}  // namespace lmc::tools
