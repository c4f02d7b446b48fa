// The request histograms `octet serve` exports on /metrics (Prometheus
// histograms with vLLM's bucket bounds, so p95 can be computed and replicas
// combined): time to first token, inter-token latency, end-to-end latency,
// queue time, prompt and generation lengths. Fed with each finished request's
// final figures (Record) and, through TokenClock, each batch of new tokens
// (the scheduler's token times, RequestTiming).
#pragma once

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>

#include "octet/base/prom_metrics.h"
#include "octet/engine/completion.h"

namespace octet::engine {

class ServingHistograms {
 public:
  // `max_tokens`: the context length (the top length bucket covers it).
  explicit ServingHistograms(int64_t max_tokens)
      : prompt_(prom::OneTwoFiveBuckets(static_cast<double>(std::max<int64_t>(max_tokens, 1)))),
        generation_(
            prom::OneTwoFiveBuckets(static_cast<double>(std::max<int64_t>(max_tokens, 1)))) {}

  // A request (one choice) that ended with "stop" or "length"; cancelled and
  // failed requests are counted by the scheduler's counters instead.
  void Record(const CompletionDelta& last) {
    if (last.finish_reason != "stop" && last.finish_reason != "length") return;
    const RequestTiming& t = last.timing;
    if (t.first_token_ns > 0) ttft_.Observe((t.first_token_ns - t.submitted_ns) * 1e-9);
    if (t.admitted_ns > 0) queue_.Observe((t.admitted_ns - t.submitted_ns) * 1e-9);
    const int64_t end = t.last_token_ns > 0 ? t.last_token_ns : t.admitted_ns;
    if (end > 0) e2e_.Observe((end - t.submitted_ns) * 1e-9);
    prompt_.Observe(static_cast<double>(last.prompt_tokens));
    generation_.Observe(static_cast<double>(last.completion_tokens));
  }

  // `n` tokens came `gap_ns` after the request's previous token (the first
  // of a request has no gap and is not recorded): each counts gap / n, as
  // when a speculative step accepts several at once.
  void TokensArrived(int64_t gap_ns, size_t n) {
    if (n == 0 || gap_ns < 0) return;
    itl_.ObserveN(gap_ns * 1e-9 / static_cast<double>(n), n);
  }

  std::string Text(const std::string& model) const {
    std::ostringstream o;
    const std::string label = "model=\"" + prom::EscapeLabel(model) + "\"";
    auto write = [&](const char* name, const char* help, const prom::Histogram& h) {
      prom::WriteHead(o, name, "histogram", help);
      h.Write(o, name, label);
    };
    write("octet_time_to_first_token_seconds",
          "Time from a request's arrival to its first generated token.", ttft_);
    write("octet_inter_token_latency_seconds",
          "Time between successive generated tokens of a request.", itl_);
    write("octet_e2e_request_latency_seconds",
          "Time from a request's arrival to its last token (finished requests).", e2e_);
    write("octet_request_queue_time_seconds", "Time a request waited for a KV cache slot.", queue_);
    write("octet_request_prompt_tokens", "Prompt length of finished requests, in tokens.", prompt_);
    write("octet_request_generation_tokens",
          "Tokens generated per finished request (each choice counts as one).", generation_);
    return o.str();
  }

 private:
  prom::Histogram ttft_{prom::TtftBuckets()};
  prom::Histogram itl_{prom::InterTokenBuckets()};
  prom::Histogram e2e_{prom::RequestLatencyBuckets()};
  prom::Histogram queue_{prom::RequestLatencyBuckets()};
  prom::Histogram prompt_;
  prom::Histogram generation_;
};

// Feeds a request's inter-token gaps to ServingHistograms from the scheduler's
// own token times (RequestTiming), one delta at a time; one per choice.
class TokenClock {
 public:
  void Arrived(const CompletionDelta& d, ServingHistograms& h) {
    const size_t n = d.ids.size();
    const RequestTiming& t = d.timing;
    if (n == 0 || t.last_token_ns <= 0) return;
    if (prev_ns_ == 0) {
      // The request's first token has no gap; the rest of its batch spans
      // first -> last token.
      if (n > 1) h.TokensArrived(std::max<int64_t>(0, t.last_token_ns - t.first_token_ns), n - 1);
    } else {
      h.TokensArrived(std::max<int64_t>(0, t.last_token_ns - prev_ns_), n);
    }
    prev_ns_ = t.last_token_ns;
  }

 private:
  int64_t prev_ns_ = 0;
};

}  // namespace octet::engine
