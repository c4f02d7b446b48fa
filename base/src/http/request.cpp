#include "octet/base/http/request.h"

#include <algorithm>

namespace octet::http {
namespace {

constexpr size_t kMaxChunkLine = 8 * 1024;     // a chunk-size line with its extensions
constexpr size_t kMaxTrailerBytes = 8 * 1024;  // all trailer lines together

bool IsTokenChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string_view TrimSpaces(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string PercentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 &&
               HexValue(s[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

std::string Request::Header(std::string_view name) const {
  for (const auto& [n, v] : headers)
    if (AsciiIEquals(n, name)) return v;
  return std::string();
}

bool Request::HasHeader(std::string_view name) const {
  for (const auto& h : headers)
    if (AsciiIEquals(h.first, name)) return true;
  return false;
}

void Request::SetHeader(std::string_view name, std::string value) {
  for (auto it = headers.begin(); it != headers.end();)
    it = AsciiIEquals(it->first, name) ? headers.erase(it) : it + 1;
  headers.emplace_back(std::string(name), std::move(value));
}

bool ParseRequestHead(std::string_view head, uint64_t max_body_bytes, Request* out,
                      ParseError* error) {
  auto fail = [error](int status, std::string message) {
    error->status = status;
    error->message = std::move(message);
    return false;
  };
  // Tolerate blank lines before the request line (RFC 9112 2.2).
  while (head.substr(0, 2) == "\r\n") head.remove_prefix(2);
  const size_t eol = head.find("\r\n");
  const std::string_view line = head.substr(0, eol);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos || sp1 == 0)
    return fail(400, "malformed request line");
  out->method = std::string(line.substr(0, sp1));
  for (char c : out->method)
    if (!IsTokenChar(c)) return fail(400, "malformed request method");
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (version == "HTTP/1.1") {
    out->http11 = true;
  } else if (version == "HTTP/1.0") {
    out->http11 = false;
  } else {
    return fail(505, "only HTTP/1.0 and HTTP/1.1 are supported");
  }
  if (target.empty() || target.front() != '/') return fail(400, "the request target is not a path");
  const size_t q = target.find('?');
  out->path = std::string(target.substr(0, q));
  out->query = q == std::string_view::npos ? std::string() : std::string(target.substr(q + 1));

  out->headers.clear();
  out->content_length = 0;
  out->chunked = false;
  out->expect_continue = false;
  bool has_length = false, close = false, keep_alive = false;
  size_t pos = eol == std::string_view::npos ? head.size() : eol + 2;
  while (pos < head.size()) {
    size_t next = head.find("\r\n", pos);
    if (next == std::string_view::npos) next = head.size();
    const std::string_view h = head.substr(pos, next - pos);
    pos = next + 2;
    const size_t colon = h.find(':');
    if (colon == std::string_view::npos || colon == 0) return fail(400, "malformed header line");
    const std::string_view name = h.substr(0, colon);
    for (char c : name)
      if (!IsTokenChar(c)) return fail(400, "malformed header name");
    const std::string_view value = TrimSpaces(h.substr(colon + 1));
    if (AsciiIEquals(name, "Content-Length")) {
      if (has_length) return fail(400, "more than one Content-Length header");
      if (value.empty() || value.size() > 18) return fail(400, "bad Content-Length");
      uint64_t n = 0;
      for (char c : value) {
        if (c < '0' || c > '9') return fail(400, "bad Content-Length");
        n = n * 10 + static_cast<uint64_t>(c - '0');
      }
      has_length = true;
      out->content_length = n;
    } else if (AsciiIEquals(name, "Transfer-Encoding")) {
      if (out->chunked || !AsciiIEquals(value, "chunked"))
        return fail(501, "only the chunked transfer coding is supported");
      out->chunked = true;
    } else if (AsciiIEquals(name, "Connection")) {
      if (HasToken(value, "close")) close = true;
      if (HasToken(value, "keep-alive")) keep_alive = true;
    } else if (AsciiIEquals(name, "Expect")) {
      if (!AsciiIEquals(value, "100-continue")) return fail(417, "unsupported Expect header");
      out->expect_continue = true;
    }
    out->headers.emplace_back(std::string(name), std::string(value));
  }
  if (has_length && out->chunked)
    return fail(400, "both Content-Length and Transfer-Encoding: chunked");
  out->keep_alive = out->http11 ? !close : (keep_alive && !close);
  if (out->content_length > max_body_bytes)
    return fail(413, "the request body is larger than the limit of " +
                         std::to_string(max_body_bytes) + " bytes");
  return true;
}

ChunkedDecoder::State ChunkedDecoder::Fail(int status, std::string message) {
  error_.status = status;
  error_.message = std::move(message);
  return State::kError;
}

ChunkedDecoder::State ChunkedDecoder::Feed(std::string_view in, size_t* consumed,
                                           std::string* body) {
  size_t i = 0;
  while (i < in.size()) {
    switch (phase_) {
      case Phase::kData: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, in.size() - i));
        body->append(in.data() + i, n);
        i += n;
        remaining_ -= n;
        if (remaining_ == 0) phase_ = Phase::kDataEnd;
        break;
      }
      case Phase::kDataEnd:  // the CRLF after a chunk's data
      case Phase::kSize:
      case Phase::kTrailer: {
        const size_t lf = in.find('\n', i);
        const size_t end = lf == std::string_view::npos ? in.size() : lf + 1;
        if (phase_ == Phase::kTrailer) trailer_bytes_ += end - i;
        line_.append(in.data() + i, end - i);
        i = end;
        if (line_.size() > kMaxChunkLine || trailer_bytes_ > kMaxTrailerBytes)
          return *consumed = i, Fail(400, "a chunk-size line or the trailers are too long");
        if (lf == std::string_view::npos) break;  // the line continues in the next read
        if (line_.size() < 2 || line_[line_.size() - 2] != '\r')
          return *consumed = i, Fail(400, "a chunked body line does not end in CRLF");
        const std::string_view text(line_.data(), line_.size() - 2);
        if (phase_ == Phase::kDataEnd) {
          if (!text.empty()) return *consumed = i, Fail(400, "chunk data longer than its size");
          phase_ = Phase::kSize;
        } else if (phase_ == Phase::kTrailer) {
          if (text.empty()) {
            line_.clear();
            *consumed = i;
            return State::kDone;
          }
        } else {
          const std::string_view size_text = TrimSpaces(text.substr(0, text.find(';')));
          if (size_text.empty() || size_text.size() > 15)
            return *consumed = i, Fail(400, "bad chunk size");
          uint64_t size = 0;
          for (char c : size_text) {
            if (HexValue(c) < 0) return *consumed = i, Fail(400, "bad chunk size");
            size = size * 16 + static_cast<uint64_t>(HexValue(c));
          }
          if (body->size() + size > max_body_bytes_)
            return *consumed = i, Fail(413, "the request body is larger than the limit of " +
                                                std::to_string(max_body_bytes_) + " bytes");
          remaining_ = size;
          phase_ = size == 0 ? Phase::kTrailer : Phase::kData;
        }
        line_.clear();
        break;
      }
    }
  }
  *consumed = i;
  return State::kNeedMore;
}

bool HasToken(std::string_view value, std::string_view token) {
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    if (comma == std::string_view::npos) comma = value.size();
    if (AsciiIEquals(TrimSpaces(value.substr(start, comma - start)), token)) return true;
    start = comma + 1;
  }
  return false;
}

std::string QueryParam(std::string_view query, std::string_view key) {
  size_t start = 0;
  while (start <= query.size()) {
    size_t amp = query.find('&', start);
    if (amp == std::string_view::npos) amp = query.size();
    const std::string_view item = query.substr(start, amp - start);
    const size_t eq = item.find('=');
    if (PercentDecode(item.substr(0, eq)) == key)
      return eq == std::string_view::npos ? std::string() : PercentDecode(item.substr(eq + 1));
    start = amp + 1;
  }
  return std::string();
}

char AsciiLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool AsciiIEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (AsciiLower(a[i]) != AsciiLower(b[i])) return false;
  return true;
}

}  // namespace octet::http
