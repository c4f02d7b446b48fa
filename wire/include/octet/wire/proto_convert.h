// The only conversions between wire/job.h's values and the octet.v1 messages
// (wire/proto/octet/v1). The agent's JobService and the cluster client both
// use these, so a field added to one side is added to the other.
// The messages are forward-declared: include the generated header
// ("octet/v1/jobs.pb.h", "octet/v1/telemetry.pb.h") where you call these.
#pragma once

#include "octet/wire/job.h"

namespace octet::v1 {
class JobSpec;
class WorkerFigures;
}  // namespace octet::v1

namespace octet::wire {

void ToProto(const JobSpec& spec, v1::JobSpec* out);
// Fields a message leaves unset (an older peer) take JobSpec's defaults:
// world size 1, transport "tcp", algorithm "auto".
JobSpec FromProto(const v1::JobSpec& message);

void ToProto(const WorkerFigures& figures, v1::WorkerFigures* out);
WorkerFigures FromProto(const v1::WorkerFigures& message);

}  // namespace octet::wire
