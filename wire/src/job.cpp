#include "octet/wire/job.h"

namespace octet::wire {

std::string_view JobKindName(JobKind kind) {
  switch (kind) {
    case JobKind::kInference:
      return "inference";
    case JobKind::kTraining:
      return "training";
    case JobKind::kRouter:
      return "router";
  }
  return "?";
}

}  // namespace octet::wire
