// Helpers for the serving tests: a random-weight checkpoint shaped like
// Qwen3 with the real Qwen3 tokenizer from the fixtures, an `octet serve`
// process whose port is read from its "serving ... on http://HOST:PORT" line,
// and curl.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <QtTest>
#include <filesystem>
#include <mutex>
#include <regex>
#include <string>
#include <vector>

#include "child_process.h"
#include "octet/base/file_util.h"
#include "octet/base/json.h"
#include "octet/base/net_util.h"
#include "octet/base/subprocess.h"
#include "octet_test.h"
#include "random_checkpoint.h"

namespace octet::test {

// The random-weight models the serving tests serve: hidden 64, 4 query and 2
// KV heads of 16, MLP 128, 4096 positions; `vocab` holds a real tokenizer's ids.
inline engine::RandomModelShape TinyShape(const char* architecture, int64_t vocab, int64_t layers) {
  engine::RandomModelShape s;
  s.architecture = architecture;
  s.vocab_size = vocab;
  s.hidden_size = 64;
  s.intermediate_size = 128;
  s.num_layers = layers;
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 16;
  s.max_position_embeddings = 4096;
  return s;
}

// A small Qwen3-shaped model (vocab 151936 to hold the Qwen3 tokenizer's ids)
// with tokenizer.json and tokenizer_config.json copied from the fixtures.
inline Status WriteQwen3WithTokenizer(const std::string& dir, int64_t layers = 2) {
  OCTET_RETURN_IF_ERROR(
      engine::WriteRandomCheckpoint(TinyShape("Qwen3ForCausalLM", 151936, layers), dir));
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    std::error_code ec;
    std::filesystem::copy_file(FixturesDir() + "/tokenizers/qwen3/" + f, dir + "/" + f,
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) return InternalError("copying " + std::string(f) + ": " + ec.message());
  }
  return Status::Ok();
}

// A small Llama-shaped model (vocab 128256 for the Llama-3 tokenizer) with the
// fixtures' Llama-3 tokenizer and, as its chat template, the Llama-3.1-style
// template with a tools section that test_chat_tools checks against Jinja2
// (tests/unit/engine_text/data/llama3.1-tools.jinja).
inline Status WriteLlama31WithTokenizer(const std::string& dir) {
  OCTET_RETURN_IF_ERROR(
      engine::WriteRandomCheckpoint(TinyShape("LlamaForCausalLM", 128256, 2), dir));
  const std::string from = FixturesDir() + "/tokenizers/llama3/";
  std::error_code ec;
  std::filesystem::copy_file(from + "tokenizer.json", dir + "/tokenizer.json",
                             std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) return InternalError("copying tokenizer.json: " + ec.message());
  OCTET_ASSIGN_OR_RETURN(std::string config, ReadFileToString(from + "tokenizer_config.json"));
  OCTET_ASSIGN_OR_RETURN(
      std::string tmpl,
      ReadFileToString(SourceDir() + "/tests/unit/engine_text/data/llama3.1-tools.jinja"));
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(config);
  j["chat_template"] = tmpl;
  return WriteFileAtomic(dir + "/tokenizer_config.json", j.dump(1));
}

class ServerProcess {
 public:
  ~ServerProcess() { Stop(); }

  // Starts `octet serve ARGS --port 0` and waits for its serving line.
  Status Start(std::vector<std::string> args, int timeout_ms = 60'000) {
    std::vector<std::string> argv = {BinDir() + "/octet", "serve", "--port", "0"};
    argv.insert(argv.end(), args.begin(), args.end());
    OCTET_RETURN_IF_ERROR(proc_.Start(std::move(argv)));
    const std::regex re("on http://[0-9.]+:([0-9]+)");
    const Deadline d = Deadline::AfterMs(timeout_ms);
    while (!d.expired()) {
      std::smatch m;
      const std::string text = output();
      if (std::regex_search(text, m, re)) {
        port_ = std::stoi(m[1]);
        return Status::Ok();
      }
      if (proc_.proc()->Poll()) return UnavailableError("octet serve exited: " + text);
      QThread::msleep(20);
    }
    return DeadlineExceededError("octet serve did not start: " + output());
  }
  int port() const { return port_; }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  pid_t pid() const { return proc_.proc() ? proc_.proc()->pid() : -1; }
  std::string output() const { return proc_.output(); }
  Subprocess* process() { return proc_.proc(); }
  void Stop() { proc_.Stop(std::chrono::milliseconds(5000)); }

 private:
  CapturedProcess proc_;
  int port_ = 0;
};

// curl -s ... ; the HTTP status is appended on its own last line ("\n%{http_code}").
struct CurlResult {
  int http_status = 0;
  std::string body;
  int exit_code = -1;
};
inline CurlResult Curl(std::vector<std::string> args, int timeout_ms = 30'000) {
  std::vector<std::string> argv = {"/usr/bin/curl", "-sS", "-N", "-w", "\n%{http_code}"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = RunProgram(argv, timeout_ms);
  CurlResult c;
  c.exit_code = r.exit_code;
  const size_t nl = r.output.rfind('\n');
  if (nl != std::string::npos) {
    c.body = r.output.substr(0, nl);
    c.http_status = std::atoi(r.output.c_str() + nl + 1);
  } else {
    c.body = r.output;
  }
  return c;
}
inline CurlResult PostJson(const std::string& url, const std::string& json, int timeout_ms = 30'000) {
  return Curl({"-X", "POST", "-H", "Content-Type: application/json", "--data-binary", json, url},
              timeout_ms);
}

// The direct children of `pid` (from /proc).
inline std::vector<pid_t> ChildProcesses(pid_t pid) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    auto stat = ReadFileToString(e.path().string() + "/stat");
    if (!stat.ok()) continue;
    const size_t close = stat->rfind(')');
    if (close == std::string::npos) continue;
    int ppid = 0;
    char state = 0;
    if (std::sscanf(stat->c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == pid) {
      out.push_back(static_cast<pid_t>(std::stoi(name)));
    }
  }
  return out;
}

}  // namespace octet::test
