// Status and Result<T>: the one error idiom of lmcfs (LevelDB's Status, with
// codes callers can act on). Every boundary returns one of these; nothing
// throws across a library API.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace lmc {

enum class Code : int {
  kOk = 0,
  kNotFound,         // no such chunk, key, file
  kCorruption,       // stored bytes fail a checksum or a structural check
  kIOError,          // an OS call failed (errno in the message)
  kNoSpace,          // ENOSPC / EDQUOT: caller may free space and retry
  kInvalidArgument,  // caller error: bad option, buffer too small, bad input
  kUnsupported,      // valid but not handled by this version (newer format)
  kBusy,             // resource held by someone else (lock, mounted store)
  kAborted,          // cancelled by the caller
  kReadOnly,         // EROFS: the filesystem written to is mounted read-only
};

const char* CodeName(Code c);

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status NotFound(std::string_view m) { return {Code::kNotFound, m}; }
  static Status Corruption(std::string_view m) { return {Code::kCorruption, m}; }
  static Status IOError(std::string_view m) { return {Code::kIOError, m}; }
  static Status NoSpace(std::string_view m) { return {Code::kNoSpace, m}; }
  static Status InvalidArgument(std::string_view m) { return {Code::kInvalidArgument, m}; }
  static Status Unsupported(std::string_view m) { return {Code::kUnsupported, m}; }
  static Status Busy(std::string_view m) { return {Code::kBusy, m}; }
  static Status Aborted(std::string_view m) { return {Code::kAborted, m}; }
  static Status ReadOnly(std::string_view m) { return {Code::kReadOnly, m}; }
  // An I/O failure from errno `err`: ENOSPC/EDQUOT become kNoSpace, EROFS
  // kReadOnly.
  static Status FromErrno(int err, std::string_view context);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }
  bool IsNoSpace() const { return code_ == Code::kNoSpace; }
  const std::string& message() const { return msg_; }
  // "Corruption: <message>"
  std::string ToString() const;
  // Explicit, greppable way to drop an error on purpose.
  void IgnoreError() const {}

 private:
  Status(Code c, std::string_view m) : code_(c), msg_(m) {}
  Code code_ = Code::kOk;
  std::string msg_;
};

// Either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                                    // NOLINT: implicit by design
  Result(Status s) : v_(std::move(s)) { assert(!std::get<Status>(v_).ok()); }  // NOLINT
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace lmc

#define LMC_CONCAT_INNER(a, b) a##b
#define LMC_CONCAT(a, b) LMC_CONCAT_INNER(a, b)

// Return the Status from the enclosing function if `expr` is not ok.
#define LMC_RETURN_IF_ERROR(expr)      \
  do {                                 \
    ::lmc::Status _lmc_st = (expr);    \
    if (!_lmc_st.ok()) return _lmc_st; \
  } while (0)

// `LMC_ASSIGN_OR_RETURN(auto x, f());` binds x to the value or returns the error.
#define LMC_ASSIGN_OR_RETURN(lhs, expr) LMC_ASSIGN_OR_RETURN_IMPL(LMC_CONCAT(_lmc_res_, __LINE__), lhs, expr)
#define LMC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
