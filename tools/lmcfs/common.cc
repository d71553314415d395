#include "common.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lmc/store/rados.h"

namespace lmc::tools {

using json = nlohmann::json;

std::string HumanSize(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  }
  return buf;
}

// ------------------------------------------------------------ Progress

Progress::Progress(std::ostream& err, std::string label, bool quiet) : err_(err), label_(std::move(label)) {
  enabled_ = !quiet && &err == &std::cerr && ::isatty(STDERR_FILENO);
  t0_ = last_ = std::chrono::steady_clock::now();
}

Progress::~Progress() { Finish(); }

void Progress::Update(uint64_t done, uint64_t total, uint64_t bytes) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && done < total && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  const double s = std::chrono::duration<double>(now - t0_).count();
  const double frac = total ? static_cast<double>(done) / static_cast<double>(total) : 0.0;
  constexpr int kWidth = 30;
  const int fill = static_cast<int>(frac * kWidth);
  std::string bar(static_cast<size_t>(fill), '#');
  bar.append(static_cast<size_t>(kWidth - fill), '.');
  std::ostringstream o;
  o << "\r" << label_ << " [" << bar << "] " << done << "/" << total;
  if (bytes && s > 0) o << "  " << HumanSize(static_cast<uint64_t>(static_cast<double>(bytes) / s)) << "/s";
  if (frac > 0 && frac < 1 && s > 0.5) {
    const double eta = s / frac - s;
    o << "  ETA " << static_cast<int>(eta) / 60 << "m" << static_cast<int>(eta) % 60 << "s";
  }
  o << "\033[K";
  err_ << o.str() << std::flush;
  drawn_ = true;
}

void Progress::Finish() {
  if (enabled_ && drawn_) err_ << "\r\033[K" << std::flush;
  drawn_ = false;
}

// ------------------------------------------------------------ targets

namespace {

// /proc/mounts writes space, tab, newline and backslash as \ooo.
std::string Unescape(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '\\' && i + 3 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      o.push_back(static_cast<char>(std::strtol(s.substr(i + 1, 3).c_str(), nullptr, 8)));
      i += 3;
    } else {
      o.push_back(s[i]);
    }
  }
  return o;
}

// The canonical path of p; for a name that does not exist (yet: the tool
// says so), its directory's canonical path and the name, so that a missing
// file is still named by where it would be.
std::string Real(const std::string& p) {
  char buf[PATH_MAX];
  if (::realpath(p.c_str(), buf)) return buf;
  std::string q = p;
  while (q.size() > 1 && q.back() == '/') q.pop_back();
  const auto slash = q.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : q.substr(0, slash);
  const std::string name = slash == std::string::npos ? q : q.substr(slash + 1);
  if (name.empty() || name == "." || name == ".." || !::realpath(dir.c_str(), buf)) return p;
  const std::string d = buf;
  return d == "/" ? "/" + name : d + "/" + name;
}

// p as a path from the filesystem's root: "." and empty parts dropped,
// ".." taking the part before it (never above the root), as the kernel
// would resolve it inside the mount; an unmounted store has no kernel to
// ask.
std::string Lexical(const std::string& p) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i <= p.size()) {
    size_t j = p.find('/', i);
    if (j == std::string::npos) j = p.size();
    const std::string part = p.substr(i, j - i);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    i = j + 1;
  }
  std::string out;
  for (const auto& part : parts) out += "/" + part;
  return out.empty() ? "/" : out;
}

}  // namespace

std::vector<LmcfsMount> ListLmcfsMounts(const std::string& mounts_file) {
  std::vector<LmcfsMount> out;
  std::ifstream f(mounts_file);
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream ls(line);
    std::string fsname, dir, type;
    if (!(ls >> fsname >> dir >> type)) continue;
    if (type != "fuse.lmcfs") continue;
    fsname = Unescape(fsname);
    if (fsname.rfind("lmcfs:", 0) != 0) continue;
    out.push_back({fsname.substr(6), Unescape(dir)});
  }
  return out;
}

namespace {

// The control channel of the lmcfs mount at `mountpoint` (of `store`): what
// its root's user.lmcfs.control_socket names (each follower of a store on
// this node has its own), else the store's own (a daemon from before that
// attribute, which always listened there).
std::string ControlSocketOf(const std::string& mountpoint, const std::string& store) {
  char buf[4096];
  const ssize_t n = ::getxattr(mountpoint.c_str(), "user.lmcfs.control_socket", buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : fs::control::SocketPath(store);
}

}  // namespace

Result<Target> ResolveTarget(const std::string& arg) {
  // A store in Ceph RADOS: mounted on this node (its daemon answers) or
  // not (opened offline, which takes its lock). Of several mounts of it
  // here, the one that writes it (it listens on the store's own channel),
  // else a follower.
  if (store::IsRadosSpec(arg)) {
    LMC_ASSIGN_OR_RETURN(store::RadosSpec spec, store::ParseRadosSpec(arg));
    Target t;
    t.store = "rados:" + spec.pool + "/" + spec.name;
    const std::string own = fs::control::SocketPath(t.store);
    for (const auto& m : ListLmcfsMounts()) {
      if (m.store != t.store) continue;
      const std::string socket = ControlSocketOf(m.mountpoint, m.store);
      if (t.online && socket != own) continue;
      t.online = true;
      t.mountpoint = m.mountpoint;
      t.socket = socket;
      if (socket == own) break;
    }
    return t;
  }
  struct stat st;
  if (::stat(arg.c_str(), &st) != 0)
    return Status::NotFound(arg + ": " + std::strerror(errno) +
                            " (expected an lmcfs mountpoint or a store directory)");
  if (!S_ISDIR(st.st_mode))
    return Status::InvalidArgument(arg +
                                   " is not a directory (expected an lmcfs mountpoint or a store directory)");
  const std::string real = Real(arg);
  for (const auto& m : ListLmcfsMounts()) {
    if (m.mountpoint != real) continue;
    Target t;
    t.online = true;
    t.mountpoint = real;
    t.store = m.store;
    t.socket = ControlSocketOf(real, m.store);
    return t;
  }
  if (::access((real + "/CONFIG").c_str(), F_OK) == 0) {
    Target t;
    t.store = real;
    return t;
  }
  return Status::InvalidArgument(arg +
                                 " is neither an lmcfs mountpoint (see /proc/mounts) nor a store directory "
                                 "(no CONFIG file)");
}

nlohmann::json UnionReport(const std::string& mountpoint) {
  char buf[65536];
  const ssize_t n = ::getxattr(mountpoint.c_str(), "user.lmcfs.union", buf, sizeof buf);
  if (n <= 0) return nullptr;
  nlohmann::json stores = nlohmann::json::array(), hidden = nlohmann::json::array();
  uint64_t shadowed = 0;
  std::istringstream in(std::string(buf, static_cast<size_t>(n)));
  std::string line;
  auto ends = [](const std::string& l, const char* suf) {
    const size_t k = std::strlen(suf);
    return l.size() > k && l.compare(l.size() - k, k, suf) == 0;
  };
  while (std::getline(in, line)) {
    if (line.rfind("  ", 0) == 0) {
      hidden.push_back(line.substr(2));
    } else if (line.rfind("shadowed=", 0) == 0) {
      shadowed = std::strtoull(line.c_str() + 9, nullptr, 10);
    } else if (ends(line, " (rw)") || ends(line, " (ro)")) {
      stores.push_back({{"name", line.substr(0, line.size() - 5)}, {"writable", ends(line, " (rw)")}});
    }
  }
  return {{"stores", stores}, {"shadowed", shadowed}, {"hidden", hidden}};
}

void LogToStderr() { spdlog::set_default_logger(spdlog::stderr_color_mt("lmcfs")); }

Result<std::unique_ptr<store::Store>> OpenOffline(const std::string& store_dir, const std::string& tool,
                                                  bool rebuild_damaged_index, bool rebuild_index) {
  store::StoreOptions so;
  so.create_if_missing = false;
  so.rebuild_damaged_index = rebuild_damaged_index;
  so.rebuild_index = rebuild_index;
  auto s = store::Store::Open(store_dir, so);
  if (s.ok() || s.status().code() != Code::kBusy) return s;
  if (store::IsRadosSpec(store_dir))
    return Status::Busy(s.status().message() + "; if it is mounted on this node, run " + tool +
                        " on the mountpoint instead");
  const std::string real = Real(store_dir);
  for (const auto& m : ListLmcfsMounts())
    if (Real(m.store) == real)
      return Status::Busy(store_dir + " is mounted at " + m.mountpoint + "; run " + tool +
                          " on the mountpoint (" + tool + " " + m.mountpoint + ") instead");
  return Status::Busy(store_dir +
                      " is in use by another process (a mount.lmcfs, or another tool); unmount it or "
                      "run " +
                      tool + " on its mountpoint");
}

Result<std::string> Ask(const Target& t, const std::string& request_json,
                        const fs::control::EventFn& on_event) {
  std::string resp;
  Status s = fs::control::Call(t.socket, request_json, on_event, &resp);
  if (!s.ok())
    return Status::IOError("cannot reach the lmcfs daemon of " + t.mountpoint + ": " + s.message());
  json j = json::parse(resp, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::Corruption("the daemon sent a malformed answer");
  if (!j.value("ok", false)) {
    const std::string code = j.value("code", "");
    const std::string msg = j.value("error", "unknown error");
    if (code == "busy") return Status::Busy(msg);
    if (code == "permission_denied") return Status::IOError(msg);
    return Status::IOError("the daemon of " + t.mountpoint + " reports: " + msg);
  }
  return fs::control::DumpJson(j["result"]);
}

std::vector<std::string> FsPaths(const Target& t, const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (const auto& a : args) {
    std::string p = a;
    if (t.online && !p.empty() && p[0] == '/') {
      const std::string r = Real(p);
      if (r == t.mountpoint) {
        p = "/";
      } else if (r.rfind(t.mountpoint + "/", 0) == 0) {
        p = r.substr(t.mountpoint.size());
      }
    } else if (t.online && !p.empty() && p[0] != '/') {
      // Relative to the current directory when that is inside the mount.
      const std::string r = Real(p);
      if (r.rfind(t.mountpoint + "/", 0) == 0) p = r.substr(t.mountpoint.size());
    }
    out.push_back(Lexical(p));
  }
  return out;
}

}  // namespace lmc::tools
