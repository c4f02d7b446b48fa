#include "octet/base/sse.h"

namespace octet {

bool SseReader::Feed(std::string_view bytes, const EventFn& on_event) {
  bool ok = true;
  size_t i = 0;
  while (i < bytes.size()) {
    if (after_cr_) {  // an LF right after a CR belongs to that line end
      after_cr_ = false;
      if (bytes[i] == '\n') {
        ++i;
        continue;
      }
    }
    size_t end = i;
    while (end < bytes.size() && bytes[end] != '\n' && bytes[end] != '\r') ++end;
    const std::string_view piece = bytes.substr(i, end - i);
    if (!piece.empty()) line_has_bytes_ = true;
    if (!overflow_) {
      if (pending_bytes() + piece.size() > max_event_bytes_) {
        // Too long: drop this event, up to the blank line that ends it.
        overflow_ = true;
        ok = false;
        line_.clear();
        event_ = Event();
        has_data_ = false;
      } else {
        line_.append(piece);
      }
    }
    if (end == bytes.size()) break;  // the line goes on in the next chunk
    after_cr_ = bytes[end] == '\r';
    i = end + 1;
    const bool blank = !line_has_bytes_;
    line_has_bytes_ = false;
    if (overflow_) {
      if (blank) overflow_ = false;
      line_.clear();
      continue;
    }
    Line(line_, on_event);
    line_.clear();
  }
  return ok;
}

void SseReader::Line(std::string_view line, const EventFn& on_event) {
  if (line.empty()) {  // the end of an event
    if (has_data_) on_event(event_);
    event_ = Event();
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;  // a comment (keep-alive)
  const size_t colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) event_.data.push_back('\n');
    event_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    event_.type.assign(value);
  }  // id, retry and unknown fields: nothing to do for a one-shot reader
}

}  // namespace octet
