#include "load_progress.h"

#include <cstdio>
#include <iostream>
#include <string>

#include "octet/base/args.h"
#include "octet/base/json.h"

namespace octet::cli {

std::function<void(const engine::LoadProgress&)> LoadProgressReporter::Callback() {
  if (!json_ && !terminal_) return {};
  return [this](const engine::LoadProgress& p) { Report(p); };
}

std::string LoadProgressReporter::JsonLine(const engine::LoadProgress& p, double elapsed_s) {
  nlohmann::json j = {{"event", "load"},
                      {"tensors_done", p.tensors_done},
                      {"tensors_total", p.tensors_total},
                      {"bytes_done", p.bytes_done},
                      {"bytes_total", p.bytes_total},
                      {"bytes_per_s", elapsed_s > 0 ? double(p.bytes_done) / elapsed_s : 0.0},
                      {"elapsed_s", elapsed_s},
                      {"tensor", p.tensor}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void LoadProgressReporter::Report(const engine::LoadProgress& p) {
  const auto now = std::chrono::steady_clock::now();
  if (!started_) {
    started_ = true;
    start_ = now;
    last_draw_ = now - std::chrono::seconds(1);
  }
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const bool last = p.tensors_done >= p.tensors_total;
  if (json_) std::cout << JsonLine(p, elapsed) << std::endl;
  if (!terminal_) return;
  if (!last && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const int width = 24;
  const double frac = p.bytes_total > 0 ? double(p.bytes_done) / double(p.bytes_total) : 1.0;
  const int filled = static_cast<int>(frac * width);
  const std::string rate = elapsed > 0 ? FormatBytes(double(p.bytes_done) / elapsed) + "/s" : "";
  std::fprintf(stderr, "\rloading [%s%s] %3d%%  %lld/%lld tensors  %s / %s  %s   ",
               std::string(filled, '#').c_str(), std::string(width - filled, ' ').c_str(),
               static_cast<int>(frac * 100), static_cast<long long>(p.tensors_done),
               static_cast<long long>(p.tensors_total), FormatBytes(double(p.bytes_done)).c_str(),
               FormatBytes(double(p.bytes_total)).c_str(), rate.c_str());
  if (last) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

}  // namespace octet::cli
