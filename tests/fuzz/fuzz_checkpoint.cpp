// The trainer's checkpoint reader (trainer/src/checkpoint.cpp), as `octet
// train --resume` meets a damaged checkpoint: a complete checkpoint of a tiny
// model is saved once; each input replaces one of its files (the first byte
// picks: config.json, model.safetensors, optimizer.safetensors or
// trainer_state.json) and LoadCheckpoint either loads it or says what is
// wrong — never a crash or an uncaught exception.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "octet/kernels/backend.h"
#include "octet/trainer/checkpoint.h"
#include "octet/trainer/gpt_model.h"
#include "octet/trainer/optimizer.h"

namespace {

namespace fs = std::filesystem;
using namespace octet;

struct Setup {
  std::unique_ptr<kernels::KernelBackend> backend;
  std::unique_ptr<trainer::GptModel> model;
  std::unique_ptr<trainer::Optimizer> optimizer;
  std::string out, checkpoint;
  std::string original[4];
};

const char* const kFiles[4] = {"config.json", "model.safetensors", "optimizer.safetensors",
                               "trainer_state.json"};

// The checkpoint's folder, removed when the process exits (a replay run or a
// fuzzing session left one in the temp directory each time).
std::string* g_out = nullptr;
void RemoveOut() {
  std::error_code ec;
  if (g_out != nullptr) fs::remove_all(*g_out, ec);
}

Setup& Get() {
  static Setup* s = [] {
    auto* s = new Setup;
    auto be = kernels::CreateBackend("scalar", {.threads = 1});
    if (!be.ok()) std::abort();
    s->backend = std::move(*be);
    trainer::GptConfig c{.n_layer = 1,
                         .n_head = 2,
                         .n_kv_head = 2,
                         .n_embd = 16,
                         .vocab_size = 32,
                         .sequence_len = 8};
    auto model = trainer::GptModel::Create(c, s->backend.get());
    if (!model.ok()) std::abort();
    s->model = std::move(*model);
    trainer::OptimizerConfig oc;
    oc.kind = "adamw";
    auto opt = trainer::Optimizer::Create(oc, s->model.get());
    if (!opt.ok()) std::abort();
    s->optimizer = std::move(*opt);
    s->out =
        (fs::temp_directory_path() / ("octet-fuzz-ckpt-" + std::to_string(::getpid()))).string();
    fs::remove_all(s->out);
    g_out = &s->out;
    std::atexit(RemoveOut);
    trainer::CheckpointState state;
    state.step = 3;
    state.settings_json = "{}";
    if (!trainer::SaveCheckpoint(s->out, *s->model, *s->optimizer, state, "", 1).ok()) std::abort();
    auto latest = trainer::LatestCheckpoint(s->out);
    if (!latest.ok()) std::abort();
    s->checkpoint = *latest;
    for (int i = 0; i < 4; ++i) {
      std::ifstream in(fs::path(s->checkpoint) / kFiles[i], std::ios::binary);
      s->original[i].assign(std::istreambuf_iterator<char>(in), {});
    }
    return s;
  }();
  return *s;
}

void Write(const fs::path& p, const char* data, size_t n) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(data, static_cast<std::streamsize>(n));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Setup& s = Get();
  const int which = data[0] % 4;
  const fs::path target = fs::path(s.checkpoint) / kFiles[which];
  Write(target, reinterpret_cast<const char*>(data) + 1, size - 1);
  trainer::CheckpointState state;
  const Status st = trainer::LoadCheckpoint(s.checkpoint, *s.model, *s.optimizer, &state);
  if (!st.ok() && st.message().empty()) std::abort();
  Write(target, s.original[which].data(), s.original[which].size());
  return 0;
}
