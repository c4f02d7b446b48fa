#include "octet/base/prom_metrics.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "octet/base/build_info.h"

namespace octet::prom {

const std::vector<double>& TtftBuckets() {
  static const std::vector<double> b = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                        0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                        20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
  return b;
}

const std::vector<double>& InterTokenBuckets() {
  static const std::vector<double> b = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                        0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
  return b;
}

const std::vector<double>& RequestLatencyBuckets() {
  static const std::vector<double> b = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                        5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                        60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
  return b;
}

const std::vector<double>& FastBuckets() {
  static const std::vector<double> b = {1e-6, 2.5e-6, 5e-6,   1e-5, 2.5e-5, 5e-5,   1e-4, 2.5e-4,
                                        5e-4, 1e-3,   2.5e-3, 5e-3, 1e-2,   2.5e-2, 0.1,  1.0};
  return b;
}

std::vector<double> OneTwoFiveBuckets(double max_value) {
  std::vector<double> b;
  for (double decade = 1;; decade *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      b.push_back(m * decade);
      if (b.back() >= max_value) return b;
    }
  }
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) { ObserveN(value, 1); }

void Histogram::ObserveN(double value, uint64_t n) {
  if (n == 0 || std::isnan(value)) return;
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;  // le: value <= bound
  MutexLock lock(mu_);
  counts_[i] += n;
  count_ += n;
  sum_ += value * static_cast<double>(n);
}

uint64_t Histogram::count() const {
  MutexLock lock(mu_);
  return count_;
}

double Histogram::sum() const {
  MutexLock lock(mu_);
  return sum_;
}

void Histogram::Write(std::ostream& o, const std::string& name, const std::string& labels) const {
  std::vector<uint64_t> counts;
  uint64_t count;
  double sum;
  {
    MutexLock lock(mu_);
    counts = counts_;
    count = count_;
    sum = sum_;
  }
  const std::string pre = labels.empty() ? "" : labels + ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts[i];
    o << name << "_bucket{" << pre << "le=\"" << Value(bounds_[i]) << "\"} " << cumulative << "\n";
  }
  o << name << "_bucket{" << pre << "le=\"+Inf\"} " << count << "\n";
  const std::string l = labels.empty() ? "" : "{" + labels + "}";
  o << name << "_sum" << l << " " << Value(sum) << "\n";
  o << name << "_count" << l << " " << count << "\n";
}

void WriteHead(std::ostream& o, const std::string& name, const char* type,
               const std::string& help) {
  o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
}

std::string Value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 9.007199254740992e15) {
    return std::to_string(static_cast<int64_t>(v));
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  // Shortest text that reads back as the same double (0.1, not 0.10000000000000001).
  for (int digits = 1; digits < 17; ++digits) {
    char shorter[40];
    std::snprintf(shorter, sizeof shorter, "%.*g", digits, v);
    if (std::strtod(shorter, nullptr) == v) return shorter;
  }
  return buf;
}

std::string Value(uint64_t v) { return std::to_string(v); }
std::string Value(int64_t v) { return std::to_string(v); }

std::string EscapeLabel(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string BuildInfoMetric() {
  const BuildInfo& b = GetBuildInfo();
  std::ostringstream o;
  WriteHead(o, "octet_build_info", "gauge",
            "Always 1; the labels say which build of Octet this is.");
  auto yn = [](bool v) { return v ? "true" : "false"; };
  o << "octet_build_info{version=\"" << EscapeLabel(b.version) << "\",commit=\""
    << EscapeLabel(b.commit) << "\",compiler=\"" << EscapeLabel(b.compiler) << "\",arch=\""
    << EscapeLabel(b.arch) << "\",cuda=\"" << yn(b.cuda) << "\",nccl=\"" << yn(b.nccl)
    << "\",verbs=\"" << yn(b.verbs) << "\"} 1\n";
  return o.str();
}

}  // namespace octet::prom
