#include "lmc/status.h"

#include <cerrno>
#include <cstring>

namespace lmc {

const char* CodeName(Code c) {
  switch (c) {
    case Code::kOk:
      return "OK";
    case Code::kNotFound:
      return "Not found";
    case Code::kCorruption:
      return "Corruption";
    case Code::kIOError:
      return "I/O error";
    case Code::kNoSpace:
      return "No space";
    case Code::kInvalidArgument:
      return "Invalid argument";
    case Code::kUnsupported:
      return "Unsupported";
    case Code::kBusy:
      return "Busy";
    case Code::kAborted:
      return "Aborted";
    case Code::kReadOnly:
      return "Read-only filesystem";
  }
  return "Unknown";
}

Status Status::FromErrno(int err, std::string_view context) {
  std::string m(context);
  m += ": ";
  m += std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) return NoSpace(m);
  if (err == EROFS) return ReadOnly(m);
  return IOError(m);
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s = CodeName(code_);
  s += ": ";
  s += msg_;
  return s;
}

}  // namespace lmc
