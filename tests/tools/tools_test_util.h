// Helpers of the tools tests: temp directories, running a tool in-process
// with captured output, random file contents.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <functional>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace lmc::tools::testing {

struct ToolResult {
  int rc = -1;
  std::string out, err;
};

inline ToolResult RunTool(const std::function<int(int, char**, std::ostream&, std::ostream&)>& fn,
                          const std::string& name, std::vector<std::string> args) {
  args.insert(args.begin(), name);
  std::vector<char*> av;
  for (auto& a : args) av.push_back(a.data());
  av.push_back(nullptr);
  std::ostringstream out, err;
  ToolResult r;
  r.rc = fn(static_cast<int>(args.size()), av.data(), out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

inline std::string RandomData(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = rng();
    for (size_t j = 0; j < 8 && i + j < n; j++) s[i + j] = static_cast<char>(v >> (8 * j));
  }
  return s;
}

class TempDir {
 public:
  explicit TempDir(const char* tag = "lmcfs_tools") {
    std::string t = std::string("/tmp/") + tag + "_XXXXXX";
    path_ = mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Sum of the sizes of STORE/packs/* (the store's data on disk).
inline uint64_t PackBytesOnDisk(const std::string& store) {
  uint64_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(store + "/packs"))
    if (e.is_regular_file()) n += e.file_size();
  return n;
}

}  // namespace lmc::tools::testing
