// router_test_upstream: one OpenAI-compatible test upstream as its own process,
// so tests can kill a pool for real and benchmarks can keep it off the router's
// threads. Prints "listening on PORT" once ready; runs until SIGTERM/SIGINT.
#include <signal.h>

#include <cstdio>
#include <iostream>

#include "octet/base/args.h"
#include "openai_upstream.h"

int main(int argc, char** argv) {
  octet::ArgParser p("router_test_upstream", "An OpenAI-compatible test upstream on 127.0.0.1.");
  p.Option("port", "P", "listen port (0 = any)", "0");
  p.Option("name", "NAME", "name used in every token", "upstream");
  p.Option("ttft-ms", "MS", "delay before the first token", "0");
  p.Option("token-ms", "MS", "delay between tokens", "1");
  p.Option("tokens", "N", "tokens per response", "8");
  p.Option("threads", "N", "server threads", "320");
  p.Option("fail-status", "S", "answer every completion with this status (0 = never)", "0");
  if (auto s = p.Parse(argc, argv); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 2;
  }
  if (p.help_requested()) {
    std::cout << p.Usage();
    return 0;
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  octet::test::UpstreamOptions o;
  o.name = p.GetString("name");
  o.ttft_ms = static_cast<int>(p.GetInt("ttft-ms").value_or(0));
  o.token_interval_ms = static_cast<int>(p.GetInt("token-ms").value_or(1));
  o.tokens = static_cast<int>(p.GetInt("tokens").value_or(8));
  o.threads = static_cast<int>(p.GetInt("threads").value_or(320));
  auto u = octet::test::OpenAiUpstream::Start(o, static_cast<int>(p.GetInt("port").value_or(0)));
  if (!u.ok()) {
    std::cerr << u.status().message() << "\n";
    return 1;
  }
  (*u)->set_fail_status(static_cast<int>(p.GetInt("fail-status").value_or(0)));
  std::printf("listening on %d\n", (*u)->port());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&signals, &sig);
  (*u)->Stop();
  return 0;
}
