#include "octet/base/http/response.h"

#include <cstdio>

#include "octet/base/http/request.h"

namespace octet::http {

const char* ReasonPhrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 413:
      return "Payload Too Large";
    case 417:
      return "Expectation Failed";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return status < 300 ? "OK" : status < 500 ? "Client Error" : "Server Error";
  }
}

std::string ResponseHead(int status, const Headers& headers, BodyFraming framing,
                         size_t content_length, bool close) {
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " + ReasonPhrase(status) + "\r\n";
  for (const auto& [name, value] : headers) {
    if (AsciiIEquals(name, "Content-Length") || AsciiIEquals(name, "Transfer-Encoding") ||
        AsciiIEquals(name, "Connection"))
      continue;
    head += name;
    head += ": ";
    head += value;
    head += "\r\n";
  }
  if (framing == BodyFraming::kLength) {
    head += "Content-Length: " + std::to_string(content_length) + "\r\n";
  } else if (framing == BodyFraming::kChunked) {
    head += "Transfer-Encoding: chunked\r\n";
  }
  if (close) head += "Connection: close\r\n";
  head += "\r\n";
  return head;
}

std::string ChunkFrame(std::string_view data) {
  if (data.empty()) return std::string();
  char size[32];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out;
  out.reserve(data.size() + static_cast<size_t>(n) + 2);
  out.append(size, static_cast<size_t>(n));
  out.append(data);
  out += "\r\n";
  return out;
}

std::string SseEvent(std::string_view data, std::string_view type) {
  std::string out;
  out.reserve(data.size() + 16);
  if (!type.empty()) {
    out += "event: ";
    out += type;
    out += "\n";
  }
  size_t start = 0;
  while (true) {
    const size_t end = data.find_first_of("\r\n", start);
    out += "data: ";
    out.append(data.substr(start, end == std::string_view::npos ? end : end - start));
    out += "\n";
    if (end == std::string_view::npos) break;
    start = end + ((data[end] == '\r' && end + 1 < data.size() && data[end + 1] == '\n') ? 2 : 1);
  }
  out += "\n";
  return out;
}

}  // namespace octet::http
