// Space figures, filesystem-level checks and chunk-to-path maps over the
// metadata column families (lmc/fs/inspect.h; figures defined in
// docs/ARCHITECTURE.md, "Operating tools").
#include "lmc/fs/inspect.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "lmc/bytes.h"
#include "lmc/fs/records.h"

namespace lmc::fs {
namespace {

using store::Cf;
using store::ChunkKey;
using store::ChunkKeyHash;

std::string Hex(std::string_view s) {
  return store::HexOf(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

struct ExtentRow {
  uint64_t offset = 0;
  ExtentRec rec;
  bool hole = false;
};

// Everything the metadata holds, read once.
struct Snapshot {
  std::map<uint64_t, InodeRec> inodes;
  std::vector<std::pair<std::string, std::string>> bad_inodes;  // key, value
  struct Dirent {
    uint64_t parent;
    std::string name;
    DirentVal val;
    std::string key, value;
  };
  std::vector<Dirent> dirents;
  std::vector<std::pair<std::string, std::string>> bad_dirents;
  std::unordered_map<uint64_t, std::vector<ExtentRow>> extents;
  std::vector<std::pair<std::string, std::string>> bad_extents;
  std::vector<std::pair<std::string, std::string>> extent_kv;  // raw, for stray repair
  std::set<uint64_t> awaiting_purge;                           // fs/orphan/ keys
};

Result<Snapshot> Load(store::Store* st, bool keep_extent_kv) {
  Snapshot s;
  LMC_RETURN_IF_ERROR(st->Scan(Cf::kInodes, "", [&](std::string_view k, std::string_view v) {
    auto r = DecodeInode(v);
    if (k.size() != 8 || !r) {
      s.bad_inodes.emplace_back(std::string(k), std::string(v));
    } else {
      s.inodes.emplace(LoadBE64(k.data()), std::move(*r));
    }
    return true;
  }));
  LMC_RETURN_IF_ERROR(st->Scan(Cf::kDirents, "", [&](std::string_view k, std::string_view v) {
    auto d = DecodeDirent(v);
    if (k.size() <= 8 || !d) {
      s.bad_dirents.emplace_back(std::string(k), std::string(v));
    } else {
      s.dirents.push_back({LoadBE64(k.data()), std::string(k.substr(8)), *d, std::string(k), std::string(v)});
    }
    return true;
  }));
  LMC_RETURN_IF_ERROR(st->Scan(Cf::kExtents, "", [&](std::string_view k, std::string_view v) {
    auto key = store::ParseExtentKey(k);
    auto raw = store::DecodeExtent(v);
    if (!key || !raw) {
      s.bad_extents.emplace_back(std::string(k), std::string(v));
      return true;
    }
    ExtentRow row;
    row.offset = key->second;
    row.hole = raw->hole();
    if (!row.hole) {
      auto e = DecodeExtentRec(v);
      if (!e) {
        // Written by something other than this fs version: figures from
        // the store's part only (frame sizes unknown).
        row.rec.length = raw->length;
        row.rec.key = raw->chunk;
        row.rec.chunk_offset = raw->chunk_offset;
      } else {
        row.rec = *e;
      }
    } else {
      row.rec.length = raw->length;
    }
    s.extents[key->first].push_back(row);
    if (keep_extent_kv) s.extent_kv.emplace_back(std::string(k), std::string(v));
    return true;
  }));
  LMC_RETURN_IF_ERROR(st->Scan(Cf::kMeta, kMetaOrphanPrefix, [&](std::string_view k, std::string_view) {
    if (k.size() == kMetaOrphanPrefix.size() + 8)
      s.awaiting_purge.insert(LoadBE64(k.data() + kMetaOrphanPrefix.size()));
    return true;
  }));
  return s;
}

// Directory tree from the dirents: parent -> children, and every path of
// every reachable inode (hard links: several).
struct Tree {
  std::unordered_map<uint64_t, std::vector<const Snapshot::Dirent*>> children;
  std::vector<std::pair<std::string, uint64_t>> paths;  // DFS order, sorted below
  std::unordered_map<uint64_t, std::vector<std::string>> paths_of;
};

Tree BuildTree(const Snapshot& s) {
  Tree t;
  for (const auto& d : s.dirents) t.children[d.parent].push_back(&d);
  std::vector<std::pair<std::string, uint64_t>> stack = {{"/", kRootIno}};
  std::set<uint64_t> seen_dirs;
  while (!stack.empty()) {
    auto [path, ino] = stack.back();
    stack.pop_back();
    t.paths.emplace_back(path, ino);
    t.paths_of[ino].push_back(path);
    auto it = s.inodes.find(ino);
    if (it == s.inodes.end() || !S_ISDIR(it->second.mode)) continue;
    if (!seen_dirs.insert(ino).second) continue;  // a directory cycle: walk it once
    auto c = t.children.find(ino);
    if (c == t.children.end()) continue;
    for (const auto* d : c->second)
      stack.emplace_back(path == "/" ? "/" + d->name : path + "/" + d->name, d->val.ino);
  }
  std::sort(t.paths.begin(), t.paths.end());
  return t;
}

struct ChunkFacts {
  uint64_t extent_refs = 0;  // extents (all inodes) naming the chunk
  bool delta = false;
  bool derived = false;  // a delta on its bf16 twin (Store::DerivedFromTwin)
  std::optional<ChunkKey> base;
  bool indexed = true;
  uint32_t frame_len = 0;  // the index's (an extent's own copy may be older)
};

}  // namespace

void SpaceFigures::Add(const SpaceFigures& o) {
  files += o.files;
  chunks += o.chunks;
  logical += o.logical;
  stored += o.stored;
  charged += o.charged;
  delta_stored += o.delta_stored;
  derived_stored += o.derived_stored;
  saved_dedup += o.saved_dedup;
  saved_delta += o.saved_delta;
  saved_derived += o.saved_derived;
  saved_codec += o.saved_codec;
}

double SpaceFigures::Ratio() const {
  return stored ? static_cast<double>(logical) / static_cast<double>(stored) : 1.0;
}

Result<TreeReport> InspectTree(store::Store* st, const std::vector<std::string>& paths) {
  LMC_ASSIGN_OR_RETURN(Snapshot s, Load(st, false));
  Tree t = BuildTree(s);

  // Chunk facts: references from extents, and delta bases from the index.
  std::unordered_map<ChunkKey, ChunkFacts, ChunkKeyHash> chunks;
  for (const auto& [ino, rows] : s.extents)
    for (const auto& r : rows)
      if (!r.hole) chunks[r.rec.key].extent_refs++;
  TreeReport rep;
  StoreTotals& tot = rep.totals;
  uint64_t plain_frames = 0, plain_decoded = 0;
  for (auto& [key, f] : chunks) {
    auto info = st->GetChunkInfo(key);
    if (!info.ok()) {
      if (!info.status().IsNotFound()) return info.status();
      f.indexed = false;
      continue;
    }
    tot.chunks++;
    f.frame_len = info->frame_len;
    tot.unique_frames += info->frame_len;
    f.base = info->base;
    f.delta = info->base.has_value();
    if (f.delta) {
      auto d = st->DerivedFromTwin(key);
      if (!d.ok() && !d.status().IsNotFound()) return d.status();
      f.derived = d.ok() && *d;
      tot.delta_chunks++;
      tot.delta_frame_bytes += info->frame_len;
    } else {
      plain_frames += info->frame_len;
      plain_decoded += info->decoded_len;
    }
  }
  // Frames per decoded byte without deltas: what a delta frame would have
  // cost on its own (the estimate behind saved_delta).
  const double plain_ratio =
      plain_decoded ? static_cast<double>(plain_frames) / static_cast<double>(plain_decoded) : 1.0;

  // Per inode.
  std::unordered_map<uint64_t, SpaceFigures> per_ino;
  for (const auto& [ino, rec] : s.inodes) {
    SpaceFigures f;
    if (!S_ISREG(rec.mode)) {
      per_ino[ino] = f;
      continue;
    }
    f.files = 1;
    f.logical = rec.size;
    double charged = 0, delta_saved = 0, derived_saved = 0;
    auto e = s.extents.find(ino);
    if (e != s.extents.end()) {
      std::set<ChunkKey> distinct;
      for (const auto& r : e->second) {
        if (r.hole) continue;
        if (distinct.insert(r.rec.key).second) f.chunks++;
        const ChunkFacts& cf = chunks[r.rec.key];
        // The frame's length now, from the index: what the file's own
        // records say (st_blocks) follows a re-encoding a moment later.
        ExtentRec now = r.rec;
        if (cf.indexed) now.frame_len = cf.frame_len;
        const uint64_t share = now.Stored();
        f.stored += share;
        charged += static_cast<double>(share) / static_cast<double>(std::max<uint64_t>(cf.extent_refs, 1));
        if (cf.delta) {
          f.delta_stored += share;
          if (cf.derived) f.derived_stored += share;
          const double alone = plain_ratio * r.rec.length;
          if (alone > static_cast<double>(share))
            (cf.derived ? derived_saved : delta_saved) +=
                (alone - static_cast<double>(share)) /
                static_cast<double>(std::max<uint64_t>(cf.extent_refs, 1));
        }
      }
    }
    f.charged = static_cast<uint64_t>(charged + 0.5);
    if (f.charged > f.stored) f.charged = f.stored;
    f.saved_dedup = f.stored - f.charged;
    f.saved_delta = static_cast<uint64_t>(delta_saved + 0.5);
    f.saved_derived = static_cast<uint64_t>(derived_saved + 0.5);
    f.saved_codec = static_cast<int64_t>(f.logical) - static_cast<int64_t>(f.charged) -
                    static_cast<int64_t>(f.saved_dedup) - static_cast<int64_t>(f.saved_delta) -
                    static_cast<int64_t>(f.saved_derived);
    per_ino[ino] = f;
  }
  for (const auto& [ino, rec] : s.inodes) {
    tot.inodes++;
    if (S_ISREG(rec.mode)) tot.files++;
    if (S_ISDIR(rec.mode)) tot.dirs++;
    const SpaceFigures& f = per_ino[ino];
    tot.logical += f.logical;
    tot.stored += f.stored;
    tot.space.Add(f);
  }
  store::StoreStats ss = st->Stats();
  tot.packs = ss.packs;
  tot.pack_bytes = ss.pack_bytes;
  tot.live_bytes = ss.live_bytes;

  // Entries: files, and directories with their subtree's sum. Paths are
  // sorted, so a directory's subtree follows it.
  std::vector<std::string> want;
  for (std::string p : paths) {
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    if (p.empty() || p[0] != '/') p = "/" + p;
    auto at = std::lower_bound(t.paths.begin(), t.paths.end(), std::pair<std::string, uint64_t>(p, 0));
    if (at != t.paths.end() && at->first == p) {
      want.push_back(p);
    } else {
      rep.not_found.push_back(p);
    }
  }
  for (const auto& [path, ino] : t.paths) {
    auto it = s.inodes.find(ino);
    if (it == s.inodes.end()) continue;  // dangling: CheckTree reports it
    TreeEntry e;
    e.path = path;
    e.ino = ino;
    e.mode = it->second.mode;
    e.nlink = it->second.nlink;
    if (!S_ISDIR(e.mode)) e.space = per_ino[ino];
    rep.entries.push_back(std::move(e));
  }
  // Add each non-directory to every ancestor directory, an inode once per
  // directory however many of its names lie below it (as du counts hard
  // links), so that a directory's figures are those of what it holds.
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < rep.entries.size(); i++) index[rep.entries[i].path] = i;
  std::set<std::pair<size_t, uint64_t>> linked;  // (directory, inode) added, for inodes of several names
  for (const auto& e : rep.entries) {
    if (S_ISDIR(e.mode)) continue;
    const auto names = t.paths_of.find(e.ino);
    const bool several = names != t.paths_of.end() && names->second.size() > 1;
    std::string p = e.path;
    while (p != "/") {
      size_t slash = p.rfind('/');
      p = slash == 0 ? "/" : p.substr(0, slash);
      auto d = index.find(p);
      if (d == index.end()) continue;
      if (several && !linked.emplace(d->second, e.ino).second) continue;
      rep.entries[d->second].space.Add(e.space);
    }
  }
  if (!paths.empty()) {  // even when none was found: then no entry
    // An entry is kept when it or a directory above it was asked for:
    // a walk up its path, not a pass over every path asked (many paths
    // against a large tree).
    const std::unordered_set<std::string> asked(want.begin(), want.end());
    auto under_asked = [&](std::string_view p) {
      for (;;) {
        if (asked.count(std::string(p))) return true;
        if (p == "/") return false;
        const size_t slash = p.rfind('/');
        p = slash == 0 ? std::string_view("/") : p.substr(0, slash);
      }
    };
    std::vector<TreeEntry> kept;
    for (auto& e : rep.entries)
      if (under_asked(e.path)) kept.push_back(std::move(e));
    rep.entries = std::move(kept);
  }
  return rep;
}

const char* TreeProblemKindName(TreeProblem::Kind kind) {
  switch (kind) {
    case TreeProblem::kDanglingDirent:
      return "dangling_dirent";
    case TreeProblem::kDirentType:
      return "dirent_type";
    case TreeProblem::kLinkCount:
      return "link_count";
    case TreeProblem::kOrphanInode:
      return "orphan_inode";
    case TreeProblem::kStrayExtent:
      return "stray_extent";
    case TreeProblem::kBadRecord:
      return "bad_record";
    case TreeProblem::kMissingChunk:
      return "missing_chunk";
  }
  return "unknown";
}

Result<TreeCheck> CheckTree(store::Store* st) {
  LMC_ASSIGN_OR_RETURN(Snapshot s, Load(st, true));
  Tree t = BuildTree(s);
  TreeCheck c;
  c.inodes = s.inodes.size();
  c.dirents = s.dirents.size();
  for (const auto& [ino, rows] : s.extents) c.extents += rows.size();
  auto path_of = [&](uint64_t ino) {
    auto p = t.paths_of.find(ino);
    return p != t.paths_of.end() ? p->second.front() : "<inode " + std::to_string(ino) + ">";
  };
  auto bad = [&](const char* what, const auto& list) {
    for (const auto& [k, v] : list) {
      TreeProblem p{TreeProblem::kBadRecord,
                    std::string(what) + " record with key " + Hex(k) + " does not decode", Hex(k), Hex(v)};
      c.problems.push_back(std::move(p));
    }
  };
  bad("inode", s.bad_inodes);
  bad("dirent", s.bad_dirents);
  bad("extent", s.bad_extents);

  // Links counted from the dirents.
  std::unordered_map<uint64_t, uint32_t> links, subdirs;
  for (const auto& d : s.dirents) {
    auto it = s.inodes.find(d.val.ino);
    const std::string where = path_of(d.parent) + (path_of(d.parent) == "/" ? "" : "/") + d.name;
    if (it == s.inodes.end()) {
      TreeProblem p{
          TreeProblem::kDanglingDirent,
          "directory entry " + where + " names inode " + std::to_string(d.val.ino) + " that does not exist",
          Hex(d.key), Hex(d.value), d.val.ino};
      p.repairable = true;
      c.problems.push_back(std::move(p));
      continue;
    }
    if ((it->second.mode & S_IFMT) != (d.val.mode & S_IFMT)) {
      c.problems.push_back({TreeProblem::kDirentType,
                            "directory entry " + where + " says type " + std::to_string(d.val.mode & S_IFMT) +
                                " but inode " + std::to_string(d.val.ino) + " is type " +
                                std::to_string(it->second.mode & S_IFMT),
                            Hex(d.key), Hex(d.value), d.val.ino});
    }
    links[d.val.ino]++;
    if (S_ISDIR(it->second.mode)) subdirs[d.parent]++;
  }
  for (const auto& [ino, rec] : s.inodes) {
    const bool dir = S_ISDIR(rec.mode);
    uint32_t want = dir ? 2 + subdirs[ino] : links[ino];
    if (ino == kRootIno) {
      if (!dir)
        c.problems.push_back(
            {TreeProblem::kDirentType, "the root inode is not a directory", Hex(InodeKey(ino)), "", ino});
    } else if (links[ino] == 0) {
      if (s.awaiting_purge.count(ino)) continue;  // unlinked while open; the next mount purges it
      c.problems.push_back({TreeProblem::kOrphanInode,
                            "inode " + std::to_string(ino) + " (" + std::to_string(rec.size) +
                                " bytes) is in no directory and not awaiting purge",
                            Hex(InodeKey(ino)), Hex(EncodeInode(rec)), ino});
      continue;
    }
    if (rec.nlink != want) {
      TreeProblem p{TreeProblem::kLinkCount,
                    path_of(ino) + " (inode " + std::to_string(ino) + ") has link count " +
                        std::to_string(rec.nlink) + " but " + std::to_string(want) + " links",
                    Hex(InodeKey(ino)), Hex(EncodeInode(rec)), ino};
      p.want_nlink = want;
      p.repairable = true;
      c.problems.push_back(std::move(p));
    }
  }
  std::unordered_map<ChunkKey, std::optional<uint32_t>, ChunkKeyHash> indexed;  // -> frame length
  for (const auto& [k, v] : s.extent_kv) {
    auto key = store::ParseExtentKey(k);
    auto e = store::DecodeExtent(v);
    if (!s.inodes.count(key->first)) {
      TreeProblem p{TreeProblem::kStrayExtent,
                    "extent at offset " + std::to_string(key->second) + " of inode " +
                        std::to_string(key->first) + " that does not exist",
                    Hex(k), Hex(v), key->first};
      p.repairable = true;
      c.problems.push_back(std::move(p));
      continue;
    }
    if (e->hole()) continue;
    auto it = indexed.find(e->chunk);
    if (it == indexed.end()) {
      auto info = st->GetChunkInfo(e->chunk);
      if (!info.ok() && !info.status().IsNotFound()) return info.status();
      it = indexed.emplace(e->chunk, info.ok() ? std::optional<uint32_t>(info->frame_len) : std::nullopt)
               .first;
    }
    if (!it->second)
      c.problems.push_back({.kind = TreeProblem::kMissingChunk,
                            .message = path_of(key->first) + " offset " + std::to_string(key->second) +
                                       " uses chunk " + e->chunk.ToHex() + " that the store does not hold",
                            .key_hex = Hex(k),
                            .value_hex = Hex(v),
                            .ino = key->first,
                            .chunk = e->chunk});
  }
  // Stored bytes (st_blocks) against the frames the index holds now.
  for (const auto& [ino, rec] : s.inodes) {
    if (!S_ISREG(rec.mode)) continue;
    uint64_t actual = 0;
    bool known = true;
    if (auto e = s.extents.find(ino); e != s.extents.end()) {
      for (const ExtentRow& row : e->second) {
        if (row.hole) continue;
        ExtentRec now = row.rec;
        if (now.decoded_len == 0) known = false;  // another fs version's extent: no frame lengths
        if (auto it = indexed.find(now.key); it != indexed.end() && it->second) now.frame_len = *it->second;
        actual += now.Stored();
      }
    }
    if (known && actual != rec.stored) c.stale_stored.push_back({ino, path_of(ino), rec.stored, actual});
  }
  return c;
}

Result<uint64_t> RepairTree(store::Store* st, const TreeCheck& check) {
  store::Batch b;
  uint64_t n = 0;
  auto unhex = [](const std::string& h) {
    std::string s(h.size() / 2, '\0');
    for (size_t i = 0; i < s.size(); i++)
      s[i] = static_cast<char>(std::stoi(h.substr(2 * i, 2), nullptr, 16));
    return s;
  };
  for (const auto& p : check.problems) {
    if (!p.repairable) continue;
    switch (p.kind) {
      case TreeProblem::kDanglingDirent:
        b.Delete(Cf::kDirents, unhex(p.key_hex));
        break;
      case TreeProblem::kStrayExtent: {
        const std::string v = unhex(p.value_hex);
        auto e = store::DecodeExtent(v);
        if (e && !e->hole()) {
          auto info = st->GetChunkInfo(e->chunk);
          if (info.ok()) b.Unref(e->chunk);
        }
        b.Delete(Cf::kExtents, unhex(p.key_hex));
        break;
      }
      case TreeProblem::kLinkCount: {
        auto v = st->Get(Cf::kInodes, InodeKey(p.ino));
        if (!v.ok()) return v.status();
        auto rec = DecodeInode(*v);
        if (!rec) continue;
        rec->nlink = p.want_nlink;
        b.Put(Cf::kInodes, InodeKey(p.ino), EncodeInode(*rec));
        break;
      }
      default:
        continue;
    }
    n++;
  }
  if (!b.empty()) LMC_RETURN_IF_ERROR(st->Commit(b, true));
  return n;
}

namespace {

// What RecomputeStored put in its batch.
struct Recomputed {
  uint64_t extents = 0;  // extents whose frame length changed
  bool inode = false;    // the inode record (its `stored`) was rewritten
};

// Puts in `b` ino's extents with the frame lengths the index has now and
// its inode with `stored` their sum, where either differs. Nothing for an
// inode that is gone or does not decode, or whose extents are of another
// fs version (their frame lengths are unknown).
Result<Recomputed> RecomputeStored(store::Store* st, uint64_t ino, store::Batch* b) {
  auto iv = st->Get(Cf::kInodes, InodeKey(ino));
  if (iv.status().IsNotFound()) return Recomputed{};  // stray extents (fsck reports them)
  LMC_RETURN_IF_ERROR(iv.status());
  auto rec = DecodeInode(*iv);
  if (!rec || !S_ISREG(rec->mode)) return Recomputed{};  // a bad record (fsck reports it)
  std::vector<std::pair<std::string, ExtentRec>> changed;
  uint64_t stored = 0;
  Status status;
  LMC_RETURN_IF_ERROR(
      st->Scan(Cf::kExtents, store::ExtentKeyPrefix(ino), [&](std::string_view k, std::string_view v) {
        auto raw = store::DecodeExtent(v);
        if (!raw || raw->hole()) return true;
        auto x = DecodeExtentRec(v);
        if (!x) {
          status = Status::Unsupported("extent without frame lengths");
          return false;
        }
        auto info = st->GetChunkInfo(x->key);
        if (!info.ok()) {
          if (!info.status().IsNotFound()) status = info.status();
          // A missing chunk (fsck reports it): the extent keeps its length.
        } else if (x->frame_len != info->frame_len) {
          x->frame_len = info->frame_len;
          changed.emplace_back(std::string(k), *x);
        }
        stored += x->Stored();
        return true;
      }));
  if (status.code() == Code::kUnsupported) return Recomputed{};
  LMC_RETURN_IF_ERROR(status);
  if (changed.empty() && rec->stored == stored) return Recomputed{};
  for (const auto& [k, x] : changed) b->Put(Cf::kExtents, k, EncodeExtentRec(x));
  rec->stored = stored;
  b->Put(Cf::kInodes, InodeKey(ino), EncodeInode(*rec));
  return Recomputed{changed.size(), true};
}

// RecomputeStored for each of `inos`, committed every 1,024 inodes.
// Returns the extents changed and the inodes rewritten.
Result<std::pair<uint64_t, uint64_t>> RecomputeStoredOf(store::Store* st, const std::set<uint64_t>& inos) {
  store::Batch b;
  uint64_t extents = 0, inodes = 0;
  for (uint64_t ino : inos) {
    LMC_ASSIGN_OR_RETURN(Recomputed r, RecomputeStored(st, ino, &b));
    if (!r.inode) continue;
    extents += r.extents;
    if (++inodes % 1024 == 0) {
      LMC_RETURN_IF_ERROR(st->Commit(b, true));
      b.Clear();
    }
  }
  if (!b.empty()) LMC_RETURN_IF_ERROR(st->Commit(b, true));
  return std::make_pair(extents, inodes);
}

}  // namespace

Result<uint64_t> RefreshStoredBytes(store::Store* st, const std::vector<ChunkKey>& keys) {
  LMC_ASSIGN_OR_RETURN(std::vector<ExtentPlace> places,
                       FindExtentsUsing(st, ChunkKeySet(keys.begin(), keys.end())));
  std::set<uint64_t> inos;
  for (const ExtentPlace& p : places) inos.insert(p.ino);
  LMC_ASSIGN_OR_RETURN(auto done, RecomputeStoredOf(st, inos));
  return done.first;
}

namespace {
// Deletes the records of `keys` (after their files were told).
Status DeleteReencodeRecords(store::Store* st, const std::vector<ChunkKey>& keys) {
  store::Batch b;
  for (const ChunkKey& k : keys) b.Delete(Cf::kMeta, ReencodeRefreshKey(k));
  return b.empty() ? Status::Ok() : st->Commit(b, false);
}
}  // namespace

DeadBaseRun RewriteDeadBasesRefreshing(store::Store* st, const ReencodedFn& reencoded,
                                       const store::DeadBaseProgressFn& progress) {
  DeadBaseRun run;
  std::vector<ChunkKey> rewritten;
  store::DeadBaseOptions o;
  if (reencoded) {
    o.before_commit = [](const std::vector<ChunkKey>& keys, store::Batch* b) {
      for (const ChunkKey& k : keys) b->Put(Cf::kMeta, ReencodeRefreshKey(k), "");
    };
    o.committed = [&](const std::vector<ChunkKey>& keys) {
      rewritten.insert(rewritten.end(), keys.begin(), keys.end());
    };
  }
  run.report = st->RewriteDeadBases(o, progress);
  // What was committed changed frame lengths, whatever came after.
  if (rewritten.empty()) return run;
  run.reencoded = rewritten.size();
  run.refreshed = reencoded(rewritten);
  if (run.refreshed.ok()) {
    if (Status ds = DeleteReencodeRecords(st, rewritten); !ds.ok())
      spdlog::warn(
          "lmcfs: deleting {} re-encode refresh records failed ({}); the next mount refreshes "
          "those files again",
          rewritten.size(), ds.ToString());
  }
  return run;
}

Result<uint64_t> RefreshLeftOver(store::Store* st, const ReencodedFn& reencoded) {
  std::vector<ChunkKey> keys;
  LMC_RETURN_IF_ERROR(
      st->Scan(Cf::kMeta, kMetaReencodeRefreshPrefix, [&](std::string_view k, std::string_view) {
        if (k.size() == kMetaReencodeRefreshPrefix.size() + ChunkKey::kSize)
          keys.push_back(ChunkKey::FromBytes(reinterpret_cast<const uint8_t*>(k.data()) +
                                             kMetaReencodeRefreshPrefix.size()));
        return true;
      }));
  if (keys.empty()) return uint64_t{0};
  LMC_ASSIGN_OR_RETURN(uint64_t n, reencoded(keys));
  LMC_RETURN_IF_ERROR(DeleteReencodeRecords(st, keys));
  spdlog::info(
      "lmcfs: stored bytes of {} extents refreshed for {} chunks that an earlier gc or rebase "
      "re-encoded (it was cut short before it told their files)",
      n, keys.size());
  return n;
}

Result<uint64_t> RepairStoredBytes(store::Store* st, const TreeCheck& check) {
  std::set<uint64_t> inos;
  for (const StaleStored& s : check.stale_stored) inos.insert(s.ino);
  LMC_ASSIGN_OR_RETURN(auto done, RecomputeStoredOf(st, inos));
  return done.second;
}

Result<std::vector<std::string>> PathsUsingChunks(store::Store* st, const std::set<ChunkKey>& bad) {
  std::vector<std::string> out;
  if (bad.empty()) return out;
  LMC_ASSIGN_OR_RETURN(Snapshot s, Load(st, false));
  Tree t = BuildTree(s);
  // A chunk is affected if it, or any base down its delta chain, is bad.
  std::unordered_map<ChunkKey, bool, ChunkKeyHash> affected;
  auto is_affected = [&](const ChunkKey& k0) {
    auto hit = affected.find(k0);
    if (hit != affected.end()) return hit->second;
    bool a = false;
    ChunkKey k = k0;
    for (int depth = 0; depth < 16 && !a; depth++) {
      if (bad.count(k)) {
        a = true;
        break;
      }
      auto info = st->GetChunkInfo(k);
      if (!info.ok() || !info->base) break;
      k = *info->base;
    }
    affected[k0] = a;
    return a;
  };
  std::set<uint64_t> inos;
  for (const auto& [ino, rows] : s.extents)
    for (const auto& r : rows)
      if (!r.hole && is_affected(r.rec.key)) inos.insert(ino);
  for (uint64_t ino : inos) {
    auto p = t.paths_of.find(ino);
    if (p == t.paths_of.end()) {
      out.push_back("<inode " + std::to_string(ino) + ">");
    } else {
      for (const auto& path : p->second) out.push_back(path);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace lmc::fs
