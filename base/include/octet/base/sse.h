// Server-sent events (the WHATWG "text/event-stream" format), read from bytes
// that arrive in chunks of any size: what the chat client, the benchmark
// runner and the router's token counter read from an OpenAI-style stream.
//
// Lines end in LF, CRLF or CR (a CRLF split across two chunks is one line
// end); an empty line ends an event; the values of its "data:" lines are
// joined with "\n" (one space after the colon is dropped); "event:" names it;
// comment lines (":...") and other fields are skipped. An event without data
// is not delivered, nor is one left unterminated when the stream ends.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace octet {

class SseReader {
 public:
  struct Event {
    std::string type;  // the "event:" field; "" for the default ("message")
    std::string data;
  };
  using EventFn = std::function<void(const Event&)>;

  // An event (or a line) longer than `max_event_bytes` is dropped, up to the
  // end of that event, and Feed returns false once for it.
  explicit SseReader(size_t max_event_bytes = size_t{16} << 20)
      : max_event_bytes_(max_event_bytes) {}

  // Reads `bytes`, calling `on_event` for each event completed by them.
  // False when an oversized event was dropped during this call.
  bool Feed(std::string_view bytes, const EventFn& on_event);

  // Bytes held for an event or line not yet complete.
  size_t pending_bytes() const { return line_.size() + event_.data.size() + event_.type.size(); }

 private:
  void Line(std::string_view line, const EventFn& on_event);

  size_t max_event_bytes_;
  std::string line_;             // the current line, without its end
  bool after_cr_ = false;        // the last byte was a CR: an LF next belongs to it
  bool line_has_bytes_ = false;  // the current line is not empty (even when dropped)
  bool overflow_ = false;        // dropping the rest of an oversized event or line
  bool has_data_ = false;        // the event has at least one data line
  Event event_;
};

}  // namespace octet
