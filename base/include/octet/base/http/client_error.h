// What went wrong with an httplib::Client call, in words a user can act on.
// httplib's own to_string gives the enum's name in the versions Debian 12
// ships ("Connection", "Read") and sentences in later ones; this is the same
// on every distribution. Header-only, like the adapter: code that includes it
// already uses cpp-httplib.
#pragma once

#include <httplib.h>

#include <string>

namespace octet::http {

inline std::string ClientErrorText(httplib::Error e) {
  switch (e) {
    case httplib::Error::Success:
      return "no error";
    case httplib::Error::Connection:
      return "could not connect (refused, or nothing listens there)";
    case httplib::Error::ConnectionTimeout:
      return "timed out connecting";
    case httplib::Error::BindIPAddress:
      return "could not bind the local address";
    case httplib::Error::Read:
      return "the connection failed or timed out while reading the answer";
    case httplib::Error::Write:
      return "the connection failed while sending the request";
    case httplib::Error::ExceedRedirectCount:
      return "too many redirects";
    case httplib::Error::Canceled:
      return "cancelled";
    case httplib::Error::SSLConnection:
      return "the TLS handshake failed";
    case httplib::Error::SSLLoadingCerts:
      return "could not load the TLS certificates";
    case httplib::Error::SSLServerVerification:
      return "the server's TLS certificate did not verify";
    case httplib::Error::Compression:
      return "could not decompress the answer";
    default:
      return httplib::to_string(e);  // newer httplib: its own words
  }
}

}  // namespace octet::http
