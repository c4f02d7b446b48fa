// The "@octet-figures {json}" line: how a worker process (octet worker, serve
// --figures, train --figures) tells whoever runs it (an agent, the workbench's
// local instances) its live figures, one line of stdout or stderr at a time.
// The JSON object's keys are WorkerFigures' names, except the speculative
// counters (spec_drafted_tokens_total, spec_accepted_tokens_total, as in
// /metrics); training lines add their own keys (app/training_run.h reads them).
// A line of another shape is log text.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "octet/base/status.h"
#include "octet/wire/job.h"

namespace octet::wire {

inline constexpr std::string_view kFiguresPrefix = "@octet-figures ";

// True for a line that starts with "@octet-figures ".
bool IsFiguresLine(std::string_view line);

// The line for a figures object (no trailing newline).
std::string FormatFiguresLine(const nlohmann::json& figures);
std::string FormatFiguresLine(const nlohmann::ordered_json& figures);

// Reads the JSON part of a figures line into `figures`: the keys present
// replace the fields they name, clamped to their ranges (fractions to 0..1,
// counts to 0..2^53, accepted drafts to at most the proposed ones); keys of
// the wrong type read as 0. "backend" is kept from an earlier line when a
// line leaves it out, and taken only as a short word of [A-Za-z0-9._+-].
// InvalidArgument when the text is not a JSON object.
Status ParseFiguresJson(std::string_view json, WorkerFigures* figures);

}  // namespace octet::wire
