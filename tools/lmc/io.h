// File-descriptor I/O for the lmc tool: full reads and writes with EINTR
// handling, and output files that appear only when complete.
#pragma once

#include <string>
#include <vector>

#include "lmc/container.h"
#include "lmc/status.h"

namespace lmc::cli {

ReadFn FdReader(int fd, const std::string& name);
WriteFn FdWriter(int fd, const std::string& name);

// Reads a whole file ("-" = stdin).
Result<std::vector<uint8_t>> ReadFile(const std::string& path);

// An output written to PATH.tmp.XXXXXX and renamed over PATH on Commit(), or
// stdout for "-". Destruction without Commit removes the temporary file, so
// a failed run never leaves a partial output behind.
class OutputFile {
 public:
  static Result<OutputFile> Open(const std::string& path, bool overwrite);
  OutputFile(OutputFile&& o) noexcept;
  ~OutputFile();
  int fd() const { return fd_; }
  Status Commit();

 private:
  OutputFile() = default;
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace lmc::cli
