// The gateway tests' fixtures (gateway_fixture.h): upstreams, a router and
// gateway from a policy's YAML, /metrics values, the two-pool policy.
#include "gateway_fixture.h"

#include <QtGlobal>
#include <cstdlib>

using namespace octet::router;

namespace octet::test {

std::unique_ptr<OpenAiUpstream> StartUpstream(const std::string& name, int token_ms, int tokens,
                                              int ttft_ms) {
  UpstreamOptions o;
  o.name = name;
  o.token_interval_ms = token_ms;
  o.tokens = tokens;
  o.ttft_ms = ttft_ms;
  o.threads = 48;
  auto u = OpenAiUpstream::Start(o);
  if (!u.ok()) qFatal("%s", u.status().message().c_str());
  return std::move(*u);
}

std::string Fill(std::string yaml, const std::map<std::string, std::string>& vars) {
  for (const auto& [k, v] : vars)
    for (size_t p; (p = yaml.find("@" + k + "@")) != std::string::npos;)
      yaml.replace(p, k.size() + 2, v);
  return yaml;
}

bool g_direct_streaming = true;

Gw StartGateway(const std::string& yaml, const std::string& file, Clock* clock) {
  auto parsed = ParsePolicy(yaml, file);
  if (!parsed.ok()) qFatal("%s", parsed.status().message().c_str());
  Gw g;
  RouterOptions ro;
  ro.clock = clock;
  auto r = Router::Create(parsed.policy, ro);
  if (!r.ok()) qFatal("%s", r.status().message().c_str());
  g.router = std::move(*r);
  GatewayOptions o;
  o.threads = 64;
  o.direct_streaming = g_direct_streaming;
  auto gw = Gateway::Start(g.router.get(), o);
  if (!gw.ok()) qFatal("%s", gw.status().message().c_str());
  g.gateway = std::move(*gw);
  return g;
}

uint64_t Metric(const std::string& text, const std::string& series) {
  const std::string key = "\n" + series + " ";
  const size_t p = text.find(key);
  if (p == std::string::npos) return 0;
  return std::strtoull(text.c_str() + p + key.size(), nullptr, 10);
}

const char* kTwoPools = R"(version: 1
pools:
  - name: large
    model: big-model
    replicas: [@L@]
    health_check: {enabled: false}
  - name: small
    replicas: [@S@]
    health_check: {enabled: false}
    fallback: large
routes:
  - name: hard
    match: {keywords: [hard]}
    pool: large
  - name: easy
    pool: small
)";

}  // namespace octet::test
