#include "octet/base/status.h"

namespace octet {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kCancelled: return "cancelled";
    case StatusCode::kUnknown: return "unknown";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kDeadlineExceeded: return "deadline exceeded";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kAlreadyExists: return "already exists";
    case StatusCode::kPermissionDenied: return "permission denied";
    case StatusCode::kResourceExhausted: return "resource exhausted";
    case StatusCode::kFailedPrecondition: return "failed precondition";
    case StatusCode::kAborted: return "aborted";
    case StatusCode::kOutOfRange: return "out of range";
    case StatusCode::kUnimplemented: return "unimplemented";
    case StatusCode::kInternal: return "internal";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kDataLoss: return "data loss";
    case StatusCode::kUnauthenticated: return "unauthenticated";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string s(StatusCodeName(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m));
}

#define OCTET_DEFINE_ERROR_(Name, Code) \
  Status Name(std::string message) { return Status(StatusCode::Code, std::move(message)); }
OCTET_DEFINE_ERROR_(InvalidArgumentError, kInvalidArgument)
OCTET_DEFINE_ERROR_(NotFoundError, kNotFound)
OCTET_DEFINE_ERROR_(OutOfRangeError, kOutOfRange)
OCTET_DEFINE_ERROR_(FailedPreconditionError, kFailedPrecondition)
OCTET_DEFINE_ERROR_(UnavailableError, kUnavailable)
OCTET_DEFINE_ERROR_(DeadlineExceededError, kDeadlineExceeded)
OCTET_DEFINE_ERROR_(DataLossError, kDataLoss)
OCTET_DEFINE_ERROR_(InternalError, kInternal)
OCTET_DEFINE_ERROR_(UnimplementedError, kUnimplemented)
OCTET_DEFINE_ERROR_(UnauthenticatedError, kUnauthenticated)
OCTET_DEFINE_ERROR_(PermissionDeniedError, kPermissionDenied)
OCTET_DEFINE_ERROR_(ResourceExhaustedError, kResourceExhausted)
OCTET_DEFINE_ERROR_(AbortedError, kAborted)
OCTET_DEFINE_ERROR_(CancelledError, kCancelled)
OCTET_DEFINE_ERROR_(AlreadyExistsError, kAlreadyExists)
#undef OCTET_DEFINE_ERROR_

}  // namespace octet
