// `octet train`: nanochat-style GPT pre-training (docs/CLI.md "Training").
//
//   octet train --init DIR --batch DIR --steps K --optimizer adamw --lr ...
//       K optimizer steps on one fixed batch (x.npy, y.npy) from the weights
//       in DIR; prints {"losses": [...]} (the loss before each step).
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command.h"
#include "octet/base/args.h"
#include "octet/base/file_util.h"
#include "octet/base/npy.h"
#include "octet/kernels/backend.h"
#include "octet/trainer/gpt_model.h"
#include "octet/trainer/model_io.h"
#include "octet/trainer/optimizer.h"

namespace octet::cli {
namespace {

int Fail(const std::string& what) {
  std::cerr << "octet train: " << what << "\n";
  return kExitFailure;
}
int Usage(const std::string& what) {
  std::cerr << "octet train: " << what << "\n";
  return kExitUsage;
}

void AddOptimizerFlags(ArgParser& p) {
  p.Option("optimizer", "adamw|muon",
           "adamw: AdamW on every parameter; muon: nanochat's Muon (block matrices) + AdamW "
           "(embedding, head)",
           "adamw");
  p.Option("lr", "X", "AdamW learning rate (--optimizer adamw)", "1e-3");
  p.Option("betas", "B1,B2", "AdamW betas", "0.9,0.95");
  p.Option("eps", "X", "AdamW epsilon", "1e-8");
  p.Option("weight-decay", "X", "decoupled weight decay", "0");
  p.Option("matrix-lr", "X", "Muon learning rate (--optimizer muon)", "0.02");
  p.Option("embedding-lr", "X", "AdamW rate for wte, scaled by (n_embd/768)^-0.5 (muon)", "0.2");
  p.Option("unembedding-lr", "X", "AdamW rate for lm_head, scaled likewise (muon)", "0.004");
}

Result<trainer::OptimizerConfig> OptimizerFromFlags(const ArgParser& p) {
  trainer::OptimizerConfig oc;
  oc.kind = p.GetString("optimizer");
  auto get = [&](const char* name, float* out) -> Status {
    OCTET_ASSIGN_OR_RETURN(double v, p.GetDouble(name));
    *out = static_cast<float>(v);
    return Status::Ok();
  };
  OCTET_RETURN_IF_ERROR(get("lr", &oc.lr));
  OCTET_RETURN_IF_ERROR(get("eps", &oc.eps));
  OCTET_RETURN_IF_ERROR(get("weight-decay", &oc.weight_decay));
  OCTET_RETURN_IF_ERROR(get("matrix-lr", &oc.matrix_lr));
  OCTET_RETURN_IF_ERROR(get("embedding-lr", &oc.embedding_lr));
  OCTET_RETURN_IF_ERROR(get("unembedding-lr", &oc.unembedding_lr));
  const auto betas = p.GetList("betas");
  if (betas.size() != 2) return InvalidArgumentError("--betas takes two numbers: B1,B2");
  try {
    oc.beta1 = std::stof(betas[0]);
    oc.beta2 = std::stof(betas[1]);
  } catch (const std::exception&) {
    return InvalidArgumentError("--betas: not numbers: " + p.GetString("betas"));
  }
  if (p.Given("betas") && oc.kind == "muon") {
    oc.adam_beta1 = oc.beta1;
    oc.adam_beta2 = oc.beta2;
  }
  if (p.Given("eps") && oc.kind == "muon") oc.adam_eps = oc.eps;
  OCTET_RETURN_IF_ERROR(oc.Validate());
  return oc;
}

Result<std::vector<int32_t>> ReadTokenMatrix(const std::string& path, int64_t* B, int64_t* T) {
  OCTET_ASSIGN_OR_RETURN(NpyArray a, ReadNpy(path));
  if (a.shape.size() != 2) {
    return InvalidArgumentError(path + ": expected a 2-D [B, T] array of token ids");
  }
  if (a.dtype != "i4" && a.dtype != "i8") {
    return InvalidArgumentError(path + ": dtype " + a.dtype + ", expected int32 token ids");
  }
  *B = a.shape[0];
  *T = a.shape[1];
  std::vector<int32_t> ids;
  ids.reserve(a.numel());
  for (int64_t v : a.AsInt64()) ids.push_back(static_cast<int32_t>(v));
  return ids;
}

// --init/--batch: K steps on one fixed batch.
int RunFixedBatch(const ArgParser& p) {
  if (!p.Given("batch")) return Usage("--init needs --batch DIR (x.npy, y.npy)");
  auto steps = p.GetInt("steps");
  if (!steps.ok() || *steps < 0) return Usage("--steps must be a count >= 0");
  auto oc = OptimizerFromFlags(p);
  if (!oc.ok()) return Usage(oc.status().message());
  auto threads = p.GetInt("threads");
  if (!threads.ok()) return Usage(threads.status().message());
  auto backend = kernels::CreateBackend(p.GetString("backend"), {.threads = int(*threads)});
  if (!backend.ok()) return Usage(backend.status().message());

  const std::string batch = p.GetString("batch");
  int64_t B = 0, T = 0, By = 0, Ty = 0;
  auto x = ReadTokenMatrix(JoinPath(batch, "x.npy"), &B, &T);
  if (!x.ok()) return Fail(x.status().message());
  auto y = ReadTokenMatrix(JoinPath(batch, "y.npy"), &By, &Ty);
  if (!y.ok()) return Fail(y.status().message());
  if (B != By || T != Ty) return Fail("x.npy and y.npy shapes differ");

  auto model = trainer::LoadModelDir(p.GetString("init"), backend->get(), int(T));
  if (!model.ok()) return Fail(model.status().message());
  trainer::GptModel& m = **model;
  auto opt = trainer::Optimizer::Create(*oc, &m);
  if (!opt.ok()) return Usage(opt.status().message());

  std::vector<float> losses;
  for (int64_t step = 0; step <= *steps; ++step) {
    auto loss = m.Forward(x->data(), y->data(), int(B), int(T));
    if (!loss.ok()) return Fail(loss.status().message());
    losses.push_back(*loss);
    if (step == *steps) break;
    m.ZeroGrads();
    if (Status s = m.Backward(1.0f); !s.ok()) return Fail(s.message());
    if (step == 0 && p.Given("grads-out")) {
      if (Status s = trainer::SaveGradients(m, p.GetString("grads-out")); !s.ok()) {
        return Fail(s.message());
      }
    }
    if (Status s = (*opt)->Step(1.0f); !s.ok()) return Fail(s.message());
    if (!p.GetFlag("json"))
      std::fprintf(stderr, "step %lld loss %.6f\n", (long long)step, losses.back());
  }
  const float final_loss = losses.back();
  losses.pop_back();
  if (p.GetFlag("json")) {
    nlohmann::ordered_json j;
    j["losses"] = losses;
    j["loss_after_last_step"] = final_loss;
    j["steps"] = *steps;
    j["optimizer"] = oc->kind;
    j["batch"] = {B, T};
    if (p.Given("grads-out")) j["grads_out"] = p.GetString("grads-out");
    std::cout << j.dump() << "\n";
  } else {
    std::fprintf(stderr, "after %lld steps: loss %.6f\n", (long long)*steps, final_loss);
  }
  return kExitOk;
}

}  // namespace

int RunTrain(const std::vector<std::string>& args) {
  ArgParser p("octet train",
              "Pre-train a nanochat-style GPT, or run K optimizer steps on one fixed batch "
              "(--init/--batch).");
  p.Option("init", "DIR", "fixed-batch mode: model folder (config.json, model.safetensors)");
  p.Option("batch", "DIR", "fixed-batch mode: folder with x.npy and y.npy (int32 [B, T])");
  p.Option("steps", "K", "optimizer steps", "10");
  p.Option("grads-out", "FILE", "fixed-batch mode: write the first step's gradients (safetensors)");
  AddOptimizerFlags(p);
  p.Option("backend", "NAME", "kernel backend: auto, scalar, avx2, neon", "auto");
  p.Option("threads", "N", "compute threads (0: all cores)", "0");
  p.Flag("json", "print one JSON document on stdout");
  if (Status s = p.Parse(args); !s.ok()) return Usage(s.message());
  if (p.help_requested()) {
    std::cout << p.Usage();
    return kExitOk;
  }
  if (p.Given("init")) return RunFixedBatch(p);
  return Usage("give --init DIR --batch DIR (see --help)");
}

}  // namespace octet::cli
