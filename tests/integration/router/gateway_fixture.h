// The gateway tests' fixtures: OpenAI-compatible upstreams on loopback, a
// router and its gateway started from a policy's YAML (@KEY@ placeholders
// filled in), the value of a /metrics series, and the two-pool policy most
// tests route with.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "octet/base/clock.h"
#include "octet/router/gateway.h"
#include "octet/router/router.h"
#include "openai_upstream.h"

namespace octet::test {

std::unique_ptr<OpenAiUpstream> StartUpstream(const std::string& name, int token_ms = 1,
                                              int tokens = 8, int ttft_ms = 0);

// Replaces every @KEY@ in `yaml`.
std::string Fill(std::string yaml, const std::map<std::string, std::string>& vars);

// Streams run on the gateway's event loop (plain-http pools, the default), or
// through a worker and an upstream thread (what https pools use). main() runs every test
// both ways.
extern bool g_direct_streaming;

struct Gw {
  std::unique_ptr<router::Router> router;
  std::unique_ptr<router::Gateway> gateway;
  int port() const { return gateway->port(); }
};

// `clock`: the router's (ejections, pins, health-check intervals); null: real time.
Gw StartGateway(const std::string& yaml, const std::string& file = "test-policy.yaml",
                Clock* clock = nullptr);

// The value of one Prometheus series ("name{labels}") in /metrics text; 0 when absent.
uint64_t Metric(const std::string& text, const std::string& series);

// A policy of two pools, large (@L@) and small (@S@, falling back to large),
// with route "hard" for prompts with the keyword and "easy" for the rest.
extern const char* kTwoPools;

}  // namespace octet::test
