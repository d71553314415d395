// A golden filesystem store described as text lines (docs/FORMAT.md,
// "Golden files"): make_golden.cc writes the lines of the store it made to
// fs-store.manifest, and golden_test.cc expects the checked-in store to
// describe itself the same way. Every line is read through the filesystem
// core or the store, so the manifest pins what a reader sees of each
// record: the tree (inodes, dirents), file bytes (extents, chunks), xattrs,
// and the snapshot policy's lineage and rebase records.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "lmc/fs/filesystem.h"
#include "lmc/fs/records.h"
#include "lmc/store/chunk_key.h"
#include "lmc/store/extent.h"
#include "lmc/store/store.h"

namespace lmc::golden {

inline std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

inline std::string Octal(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%o", v);
  return buf;
}

// Lines, in this order:
//   <d|f|l> <path> ino=<n> mode=<octal permissions> nlink=<n> size=<n>
//     then, files: sha256=<hex of the bytes read>; symlinks: target=<target>
//   xattr <path> <name> <hex value>        (stored ones, not user.lmcfs.*)
//   extent <path> <file offset> <length> <chunk key> depth=<n> base=<key|->
//   meta <hex key> <hex value>             (lineage/, lineage-dir/, rebase/)
// Entries depth first, names sorted; a hard-linked inode's xattrs and
// extents under the first path that reaches it. Any error becomes an
// "error ..." line, so a comparison shows it.
inline std::vector<std::string> DescribeFs(fs::Filesystem& fsys, store::Store& st) {
  std::vector<std::string> entries, xattrs, extents;
  std::map<uint64_t, std::string> first_path;  // ino -> path
  auto describe = [&](auto&& self, uint64_t ino, const std::string& path) -> void {
    struct stat s {};
    if (int e = fsys.GetAttr(ino, &s)) {
      entries.push_back("error getattr " + path + " " + std::to_string(e));
      return;
    }
    const char kind = S_ISDIR(s.st_mode) ? 'd' : S_ISLNK(s.st_mode) ? 'l' : S_ISREG(s.st_mode) ? 'f' : '?';
    std::string line = std::string(1, kind) + " " + path + " ino=" + std::to_string(ino) +
                       " mode=" + Octal(s.st_mode & 07777) + " nlink=" + std::to_string(s.st_nlink) +
                       " size=" + std::to_string(s.st_size);
    const bool first = first_path.emplace(ino, path).second;
    if (kind == 'f') {
      std::string bytes;
      if (int e = fsys.Open(ino, O_RDONLY)) {
        line += " error open " + std::to_string(e);
      } else {
        if (int e = fsys.Read(ino, 0, static_cast<size_t>(s.st_size), &bytes))
          line += " error read " + std::to_string(e);
        else
          line += " sha256=" +
                  store::ChunkKey::Of(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()).ToHex();
        (void)fsys.Release(ino, false);  // read-only: nothing to flush
      }
    } else if (kind == 'l') {
      std::string target;
      if (int e = fsys.Readlink(ino, &target))
        line += " error readlink " + std::to_string(e);
      else
        line += " target=" + target;
    }
    entries.push_back(line);
    if (first) {
      std::string names;
      if (int e = fsys.ListXattr(ino, &names))
        xattrs.push_back("error listxattr " + path + " " + std::to_string(e));
      for (size_t i = 0; i < names.size();) {
        const std::string name = names.c_str() + i;
        i += name.size() + 1;
        if (name.starts_with("user.lmcfs.")) continue;  // virtual: derived from the extents
        std::string value;
        if (int e = fsys.GetXattr(ino, name, &value))
          xattrs.push_back("error getxattr " + path + " " + name + " " + std::to_string(e));
        else
          xattrs.push_back("xattr " + path + " " + name + " " + Hex(value));
      }
    }
    if (kind != 'd') return;
    std::vector<fs::DirEntry> children;
    if (int e = fsys.ReadDir(ino, &children)) {
      entries.push_back("error readdir " + path + " " + std::to_string(e));
      return;
    }
    std::map<std::string, uint64_t> sorted;
    for (const auto& c : children)
      if (c.name != "." && c.name != "..") sorted[c.name] = c.ino;
    for (const auto& [name, child] : sorted) self(self, child, (path == "/" ? "/" : path + "/") + name);
  };
  describe(describe, fs::kRootIno, "/");

  Status scan = st.Scan(store::Cf::kExtents, "", [&](std::string_view k, std::string_view v) {
    auto pos = store::ParseExtentKey(k);
    auto e = fs::DecodeExtentRec(v);
    if (!pos || !e) {
      extents.push_back("error extent " + Hex(k));
      return true;
    }
    auto p = first_path.find(pos->first);
    std::string line = "extent " + (p == first_path.end() ? "ino:" + std::to_string(pos->first) : p->second) +
                       " " + std::to_string(pos->second) + " " + std::to_string(e->length) + " " +
                       e->key.ToHex();
    if (auto info = st.GetChunkInfo(e->key); info.ok())
      line +=
          " depth=" + std::to_string(info->delta_depth) + " base=" + (info->base ? info->base->ToHex() : "-");
    else
      line += " error " + info.status().ToString();
    extents.push_back(line);
    return true;
  });
  if (!scan.ok()) extents.push_back("error scan extents " + scan.ToString());

  std::vector<std::string> out = std::move(entries);
  out.insert(out.end(), xattrs.begin(), xattrs.end());
  out.insert(out.end(), extents.begin(), extents.end());
  for (std::string_view prefix : {"lineage/", "lineage-dir/", "rebase/"}) {
    Status s = st.Scan(store::Cf::kMeta, prefix, [&](std::string_view k, std::string_view v) {
      out.push_back("meta " + Hex(k) + " " + Hex(v));
      return true;
    });
    if (!s.ok()) out.push_back("error scan meta " + s.ToString());
  }
  return out;
}

}  // namespace lmc::golden
