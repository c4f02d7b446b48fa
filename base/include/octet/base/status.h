// A Status encapsulates the result of an operation: success, or an error code
// with a message that says what went wrong and where (file, tensor, byte
// offset, YAML line:col, peer rank). Result<T> holds either a T or an error
// Status. Both are [[nodiscard]]: an ignored error is a compile warning.
//
// Errors never cross a library boundary as exceptions; every public function
// that can fail returns Status or Result<T>.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace octet {

enum class StatusCode {
  kOk = 0,
  kCancelled,
  kUnknown,
  kInvalidArgument,
  kDeadlineExceeded,
  kNotFound,
  kAlreadyExists,
  kPermissionDenied,
  kResourceExhausted,
  kFailedPrecondition,
  kAborted,
  kOutOfRange,
  kUnimplemented,
  kInternal,
  kUnavailable,
  kDataLoss,
  kUnauthenticated,
};

// Short lower-case name of a code ("invalid argument").
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "invalid argument: <message>" or "ok".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>", for adding the
  // place an error passed through (a file name, a tensor, a rank).
  Status WithContext(std::string_view context) const;

  // Explicitly discards a status whose failure does not matter (cleanup paths).
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

Status InvalidArgumentError(std::string message);
Status NotFoundError(std::string message);
Status OutOfRangeError(std::string message);
Status FailedPreconditionError(std::string message);
Status UnavailableError(std::string message);
Status DeadlineExceededError(std::string message);
Status DataLossError(std::string message);
Status InternalError(std::string message);
Status UnimplementedError(std::string message);
Status UnauthenticatedError(std::string message);
Status PermissionDeniedError(std::string message);
Status ResourceExhaustedError(std::string message);
Status AbortedError(std::string message);
Status CancelledError(std::string message);
Status AlreadyExistsError(std::string message);

// Result<T> is a T or an error Status (never an OK Status).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    assert(!std::get<Status>(v_).ok() && "Result constructed from an OK Status");
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "Result from OK Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // The error, or OK when a value is held.
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

  T& value() & {
    assert(ok());
    return std::get<T>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<T>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<T>(std::move(v_));
  }
  T value_or(T fallback) const& { return ok() ? std::get<T>(v_) : std::move(fallback); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace octet

#define OCTET_STATUS_CONCAT_INNER_(a, b) a##b
#define OCTET_STATUS_CONCAT_(a, b) OCTET_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (a Status) is an error.
#define OCTET_RETURN_IF_ERROR(expr)                         \
  do {                                                      \
    ::octet::Status octet_status_ = (expr);                 \
    if (!octet_status_.ok()) return octet_status_;          \
  } while (0)

// `OCTET_ASSIGN_OR_RETURN(auto x, Foo());` — declares/assigns the value of a
// Result, or returns its error from the enclosing function.
#define OCTET_ASSIGN_OR_RETURN(lhs, expr) \
  OCTET_ASSIGN_OR_RETURN_IMPL_(OCTET_STATUS_CONCAT_(octet_result_, __LINE__), lhs, expr)
#define OCTET_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
