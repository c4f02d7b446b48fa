// Model::Load and Model::LoadWeights: a checkpoint folder (safetensors, HF
// config) into the model's weights, with the optional NVFP4 quantization and
// tile copies. Placing them on the backend and the forward pass are in
// model.cpp and model_forward.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>

#include "layer_linears.h"
#include "octet/base/deadline.h"
#include "octet/base/file_util.h"
#include "octet/base/huge_page_arena.h"
#include "octet/base/log.h"
#include "octet/base/mem_info.h"
#include "octet/engine/model.h"
#include "octet/kernels/backends.h"

namespace octet::engine {

using kernels::WeightFormat;
using kernels::WeightMatrix;

// ---- loading ----------------------------------------------------------------

Result<LoadQuantize> ParseLoadQuantize(const std::string& name) {
  if (name == "off") return LoadQuantize::kOff;
  if (name == "nvfp4") return LoadQuantize::kNvfp4;
  return InvalidArgumentError("--quantize takes nvfp4 or off, not '" + name + "'");
}

std::string_view LoadQuantizeName(LoadQuantize q) {
  return q == LoadQuantize::kNvfp4 ? "nvfp4" : "off";
}

namespace {

// The tensor a nanochat checkpoint stores for a Llama-style name
// ("model.layers.3.self_attn.q_proj.weight" -> "transformer.h.3.attn.c_q.weight";
// embed_tokens -> transformer.wte, gate_proj -> mlp.c_fc, down_proj ->
// mlp.c_proj; lm_head.weight is lm_head.weight). Other names are unchanged.
std::string NanochatTensorName(const std::string& name) {
  if (name.rfind("model.embed_tokens.", 0) == 0) return "transformer.wte." + name.substr(19);
  const std::string layers = "model.layers.";
  if (name.rfind(layers, 0) != 0) return name;
  const size_t dot = name.find('.', layers.size());
  if (dot == std::string::npos) return name;
  const std::string index = name.substr(layers.size(), dot - layers.size());
  const std::string rest = name.substr(dot + 1);
  static const std::pair<const char*, const char*> kModules[] = {
      {"self_attn.q_proj", "attn.c_q"}, {"self_attn.k_proj", "attn.c_k"},
      {"self_attn.v_proj", "attn.c_v"}, {"self_attn.o_proj", "attn.c_proj"},
      {"mlp.gate_proj", "mlp.c_fc"},    {"mlp.down_proj", "mlp.c_proj"}};
  for (const auto& [hf, nano] : kModules) {
    const std::string prefix = std::string(hf) + ".";
    if (rest.rfind(prefix, 0) == 0) {
      return "transformer.h." + index + "." + nano + "." + rest.substr(prefix.size());
    }
  }
  return name;
}

// Reads tensors out of a checkpoint with errors that name the tensor, its file
// and the expected shape, and reports progress. Names are the Llama-style ones;
// a nanochat checkpoint's are translated (NanochatTensorName) on lookup, and
// errors name the tensor as stored.
int64_t MiB(int64_t bytes) { return (bytes + (1 << 19)) / (1 << 20); }

// What an optional copy of the weights may take (LoadOptions::nvfp4_tiles_max_bytes):
// MemAvailable less the checkpoint's bytes and a reserve of max(1 GiB,
// MemTotal / 10); no limit when /proc/meminfo cannot be read.
int64_t SpareMemoryForCopies(int64_t checkpoint_bytes) {
  const auto mi = ReadMemInfo();
  if (!mi.ok()) return std::numeric_limits<int64_t>::max();
  const int64_t reserve =
      std::max<int64_t>(int64_t{1} << 30, static_cast<int64_t>(mi->total_bytes / 10));
  return std::max<int64_t>(0,
                           static_cast<int64_t>(mi->available_bytes) - checkpoint_bytes - reserve);
}

// LoadOptions::check_memory: this rank's resident share of the checkpoint
// against what the backend's memory can take (KernelBackend::AvailableMemory:
// MemAvailable for host memory; a device's free memory, or on unified memory
// the larger of that and MemAvailable), the message naming the figure used.
Status CheckResidentMemory(const std::string& dir, int64_t checkpoint_bytes, const LoadOptions& o,
                           const kernels::KernelBackend& backend) {
  if (!o.check_memory) return Status::Ok();
  const auto budget = backend.AvailableMemory(o.meminfo_path);
  if (!budget.ok()) {
    OCTET_LOG(WARNING) << "memory check skipped: " << budget.status().message();
    return Status::Ok();
  }
  const int ranks = std::max(1, o.tp_ranks);
  const int64_t need = checkpoint_bytes / ranks;
  const int64_t available = budget->bytes;
  if (need <= available) return Status::Ok();
  auto size = [](int64_t bytes) {
    return bytes >= (int64_t{1} << 20) ? std::to_string(MiB(bytes)) + " MiB"
                                       : std::to_string((bytes + 512) / 1024) + " KiB";
  };
  std::string share = "its checkpoint of " + size(checkpoint_bytes);
  if (ranks > 1) {
    share = "its 1/" + std::to_string(ranks) + " share of the " + size(checkpoint_bytes) +
            " checkpoint";
  }
  const bool device = backend.memory_kind() == kernels::MemoryKind::kDevice;
  return ResourceExhaustedError(
      "model '" + dir + "' needs about " + size(need) + " resident on this " +
      (device      ? std::string(backend.name()) + " device"
       : ranks > 1 ? "rank"
                   : "machine") +
      " (" + share + ") but " + budget->source + " is " + size(available) + ": loading it would " +
      (device ? "fail to allocate. " : "push the machine into swap or the OOM killer. ") +
      "Free memory, split it over more TP ranks, or pass --ignore-memory-check to load it anyway");
}

class Loader {
 public:
  // `realigned`: copies of misaligned tensors the model keeps; `tiles`: where
  // NVFP4 tile copies go, null when the backend does not read them
  // (KernelBackend::UsesNvfp4Tiles, LoadOptions::nvfp4_tiles), at most
  // `tiles_budget` bytes of them; `pool`: the threads that write them (may be
  // null).
  Loader(const CheckpointStore& store, const ModelConfig& config, const LoadOptions& options,
         std::vector<std::vector<uint8_t>>* realigned, HugePageArena* tiles, int64_t tiles_budget,
         kernels::ThreadPool* pool, std::vector<std::unique_ptr<Nvfp4Tensor>>* quantized)
      : store_(store),
        config_(config),
        options_(options),
        realigned_(realigned),
        quantized_(quantized),
        tiles_(tiles),
        tiles_budget_(tiles_budget),
        pool_(pool) {
    progress_.bytes_total = store.total_bytes();
    progress_.tensors_total = static_cast<int64_t>(store.tensors().size());
  }

  // The name `name` has in this checkpoint.
  std::string Stored(const std::string& name) const {
    return config_.arch == Architecture::kNanochat ? NanochatTensorName(name) : name;
  }
  const TensorInfo* Find(const std::string& name) const { return store_.Find(Stored(name)); }

  Result<const TensorInfo*> Require(const std::string& hf_name, const std::vector<int64_t>& shape) {
    if (options_.cancelled && options_.cancelled()) {
      return CancelledError("loading the model was cancelled (at tensor '" + Stored(hf_name) +
                            "')");
    }
    const std::string name = Stored(hf_name);
    const TensorInfo* t = store_.Find(name);
    if (!t) {
      return NotFoundError("tensor '" + name + "' (expected shape " + ShapeString(shape) +
                           ") is missing from the checkpoint" + UnindexedHint());
    }
    if (t->shape != shape) {
      return InvalidArgumentError("tensor '" + name + "' in " + t->file + " has shape " +
                                  t->ShapeString() + " but " + ShapeString(shape) +
                                  " was expected");
    }
    OCTET_RETURN_IF_ERROR(Touch(*t));
    return t;
  }

  Result<std::vector<float>> Vector(const std::string& hf_name, int64_t n) {
    const std::string name = Stored(hf_name);
    OCTET_ASSIGN_OR_RETURN(const TensorInfo* t, Require(hf_name, {n}));
    std::vector<float> out(n);
    switch (t->dtype) {
      case DType::kF32:
        std::memcpy(out.data(), t->data, n * 4);
        break;
      case DType::kBF16:
      case DType::kF16:
        for (int64_t i = 0; i < n; ++i) {
          uint16_t h;
          std::memcpy(&h, t->data + i * 2, 2);
          out[i] = t->dtype == DType::kBF16 ? kernels::Bf16ToF32(h) : kernels::F16ToF32(h);
        }
        break;
      default:
        return InvalidArgumentError("tensor '" + name + "' has dtype " +
                                    std::string(DTypeName(t->dtype)) +
                                    "; expected F32, BF16 or F16");
    }
    // Vectors (norm weights, biases) are small: every value is checked.
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(out[i])) {
        return DataLossError("tensor '" + name + "' in " + t->file + " holds " +
                             std::to_string(out[i]) + " at element " + std::to_string(i) +
                             ": the checkpoint is damaged or was converted wrongly");
      }
    }
    return out;
  }

  // A dense float matrix [rows, cols] as a kernel view.
  Result<WeightMatrix> Dense(const std::string& hf_name, int64_t rows, int64_t cols) {
    const std::string name = Stored(hf_name);
    OCTET_ASSIGN_OR_RETURN(const TensorInfo* t, Require(hf_name, {rows, cols}));
    WeightFormat f;
    switch (t->dtype) {
      case DType::kF32:
        f = WeightFormat::kF32;
        break;
      case DType::kBF16:
        f = WeightFormat::kBF16;
        break;
      case DType::kF16:
        f = WeightFormat::kF16;
        break;
      default:
        return InvalidArgumentError("tensor '" + name + "' has dtype " +
                                    std::string(DTypeName(t->dtype)) +
                                    "; expected F32, BF16 or F16 (or NVFP4 U8 with scales)");
    }
    return WeightMatrix::Dense(f, Aligned(*t), rows, cols);
  }

  Result<float> Scalar(const std::string& hf_name) {
    const std::string name = Stored(hf_name);
    const TensorInfo* t = store_.Find(name);
    if (!t)
      return NotFoundError("tensor '" + name +
                           "' (expected shape []) is missing from the checkpoint");
    if (t->dtype != DType::kF32 || t->numel() != 1 || t->shape.size() > 1) {
      return InvalidArgumentError("tensor '" + name + "' must be an F32 scalar (shape []), has " +
                                  std::string(DTypeName(t->dtype)) + " " + t->ShapeString());
    }
    OCTET_RETURN_IF_ERROR(Touch(*t));
    float v;
    std::memcpy(&v, t->data, 4);
    if (!(v > 0.0f) || !std::isfinite(v)) {
      return InvalidArgumentError("tensor '" + name + "' holds " + std::to_string(v) +
                                  "; a scale must be positive and finite");
    }
    return v;
  }

  bool quantizing() const { return options_.quantize == LoadQuantize::kNvfp4; }

  // The NVFP4 global scale on-load quantization gives the modules' weights
  // together (q/k/v, gate/up: as ModelOpt fuses them): over the whole stored
  // tensors, whatever slice this rank keeps. Tensors that are missing, not
  // dense or not matrices are left out (LoadLinear reports them).
  Result<float> GroupGlobalScale(const std::vector<std::string>& modules) {
    float amax = 0.0f;
    for (const std::string& module : modules) {
      const TensorInfo* t = Find(module + ".weight");
      if (!t || t->shape.size() != 2) continue;
      WeightFormat f;
      if (t->dtype == DType::kBF16) {
        f = WeightFormat::kBF16;
      } else if (t->dtype == DType::kF16) {
        f = WeightFormat::kF16;
      } else if (t->dtype == DType::kF32) {
        f = WeightFormat::kF32;
      } else {
        continue;
      }
      const WeightMatrix w = WeightMatrix::Dense(f, Aligned(*t), t->shape[0], t->shape[1]);
      OCTET_ASSIGN_OR_RETURN(float a, DenseAbsMax(w, pool_));
      amax = std::max(amax, a);
    }
    return Nvfp4GlobalScaleOrOne(amax);
  }

  // On-load quantization of `w` (this rank's slice of `module`) with global
  // scale `global`: the NVFP4 view, kept in the model; `w` unchanged when it
  // is not a dense matrix with whole 16-blocks.
  Result<WeightMatrix> QuantizeWeight(const std::string& module, const WeightMatrix& w,
                                      float global, bool copy_of_kept) {
    if (w.format == WeightFormat::kNvfp4 || w.rows == 0) return w;
    if (w.cols % kernels::kNvfp4BlockSize != 0) {
      OCTET_LOG(INFO) << "--quantize nvfp4: '" << module << "' stays "
                      << kernels::WeightFormatName(w.format) << " (its " << w.cols
                      << " inputs are not a multiple of 16)";
      return w;
    }
    OCTET_ASSIGN_OR_RETURN(Nvfp4Tensor t, QuantizeNvfp4Dense(w, global, pool_));
    const int64_t dense = w.rows * w.cols * (w.format == WeightFormat::kF32 ? 4 : 2);
    const int64_t nvfp4 = static_cast<int64_t>(t.packed.size() + t.scales.size());
    if (copy_of_kept) {
      copy_bytes_ += nvfp4;
    } else {
      quantized_dense_bytes_ += dense;
      quantized_nvfp4_bytes_ += nvfp4;
    }
    ++quantized_count_;
    quantized_->push_back(std::make_unique<Nvfp4Tensor>(std::move(t)));
    return quantized_->back()->view();
  }

  // LoadOptions::quantize's totals: matrices, their stored bytes, their NVFP4
  // bytes, and the NVFP4 copies made beside weights that stay (a tied lm_head).
  int64_t quantized_count() const { return quantized_count_; }
  int64_t quantized_dense_bytes() const { return quantized_dense_bytes_; }
  int64_t quantized_nvfp4_bytes() const { return quantized_nvfp4_bytes_; }
  int64_t copy_bytes() const { return copy_bytes_; }

  // A linear layer's weight [out, in] (dense or NVFP4), sliced for this rank.
  // With LoadOptions::quantize, a dense weight becomes NVFP4 when
  // `quantizable`, with global scale `nvfp4_global` (<= 0: its own tensor's).
  Result<Linear> LoadLinear(const std::string& module, int64_t out, int64_t in, LinearRole role,
                            bool bias, bool quantizable = true, float nvfp4_global = 0.0f) {
    Linear l;
    l.name = module;
    l.role = role;
    const std::string wname = Stored(module + ".weight");
    const TensorInfo* t = store_.Find(wname);
    const bool quantized = config_.quant.nvfp4 && !config_.quant.Excluded(module);
    if (t && t->dtype == DType::kU8) {
      if (!quantized) {
        return InvalidArgumentError(
            "tensor '" + wname + "' is U8 (packed NVFP4) but " +
            (config_.quant.nvfp4 ? "'" + module + "' is excluded from quantization"
                                 : std::string("the model has no NVFP4 quantization config")));
      }
      if (in % kernels::kNvfp4BlockSize != 0) {
        return InvalidArgumentError("'" + module + "': NVFP4 needs the input size (" +
                                    std::to_string(in) + ") to be a multiple of 16");
      }
      OCTET_ASSIGN_OR_RETURN(const TensorInfo* packed, Require(module + ".weight", {out, in / 2}));
      OCTET_ASSIGN_OR_RETURN(const TensorInfo* scales,
                             Require(module + ".weight_scale", {out, in / 16}));
      if (scales->dtype != DType::kF8E4M3) {
        return InvalidArgumentError("tensor '" + Stored(module + ".weight_scale") + "' has dtype " +
                                    std::string(DTypeName(scales->dtype)) + "; expected F8_E4M3");
      }
      OCTET_ASSIGN_OR_RETURN(float global, Scalar(module + ".weight_scale_2"));
      if (const TensorInfo* is = Find(module + ".input_scale")) {
        OCTET_RETURN_IF_ERROR(Touch(*is));
      }
      l.weight = WeightMatrix::Nvfp4(packed->data, scales->data, global, out, in);
    } else {
      if (!t) {
        return NotFoundError("tensor '" + wname + "' (expected shape " +
                             ShapeString(quantized ? std::vector<int64_t>{out, in / 2}
                                                   : std::vector<int64_t>{out, in}) +
                             (quantized ? " U8 NVFP4" : "") + ") is missing from the checkpoint" +
                             UnindexedHint());
      }
      OCTET_ASSIGN_OR_RETURN(l.weight, Dense(module + ".weight", out, in));
      quantizable = quantizable && quantizing();
      if (quantizable && nvfp4_global <= 0.0f) {
        OCTET_ASSIGN_OR_RETURN(nvfp4_global, GroupGlobalScale({module}));
      }
    }
    if (bias) {
      OCTET_ASSIGN_OR_RETURN(l.bias.host, Vector(module + ".bias", out));
    }
    if (options_.shard) {
      WeightSlice s = options_.shard(module, role, out, in);
      const int64_t rc = s.row_count < 0 ? out - s.row_begin : s.row_count;
      const int64_t cc = s.col_count < 0 ? in - s.col_begin : s.col_count;
      if (s.row_begin < 0 || rc < 0 || s.row_begin + rc > out ||
          !l.weight.CanSliceCols(s.col_begin, cc)) {
        return InvalidArgumentError(
            "'" + module + "': slice rows [" + std::to_string(s.row_begin) + ", +" +
            std::to_string(rc) + ") cols [" + std::to_string(s.col_begin) + ", +" +
            std::to_string(cc) + ") does not fit the " +
            std::string(kernels::WeightFormatName(l.weight.format)) + " weight [" +
            std::to_string(out) + ", " + std::to_string(in) + "]");
      }
      l.weight = l.weight.RowSlice(s.row_begin, rc).ColSlice(s.col_begin, cc);
      if (!l.bias.empty()) {
        l.bias.host = std::vector<float>(l.bias.host.begin() + s.row_begin,
                                         l.bias.host.begin() + s.row_begin + rc);
      }
    }
    if (quantizable && l.weight.format != WeightFormat::kNvfp4) {
      OCTET_ASSIGN_OR_RETURN(l.weight, QuantizeWeight(module, l.weight, nvfp4_global, false));
    }
    l.weight = WithTiles(module, l.weight);
    return l;
  }

  // `w` with its tile copy for decode (of this rank's slice only)
  // when the backend reads tiles, w can be tiled and the budget allows.
  WeightMatrix WithTiles(const std::string& module, const WeightMatrix& w) {
    if (!tiles_ || tiles_refused_ || !kernels::CanTileNvfp4(w)) return w;
    const int64_t bytes = kernels::Nvfp4TilesBytes(w);
    if (tile_bytes_ + bytes > tiles_budget_) {
      tiles_refused_ = true;
      OCTET_LOG(WARNING) << "the NVFP4 tile copy stops at " << MiB(tile_bytes_)
                         << " MiB, its budget of " << MiB(tiles_budget_)
                         << " MiB (LoadOptions::nvfp4_tiles_max_bytes): '" << module
                         << "' and later layers decode row-major";
      return w;
    }
    uint8_t* mem = tiles_->Allocate(static_cast<size_t>(bytes));
    if (!mem) {
      tiles_refused_ = true;
      OCTET_LOG(WARNING) << "no memory for the NVFP4 tile copy of '" << module
                         << "' and later layers: they decode row-major";
      return w;
    }
    tile_bytes_ += bytes;
    return kernels::TileNvfp4(w, mem, pool_);
  }

  int64_t tile_bytes() const { return tile_bytes_; }

  // For a missing tensor: bytes of a file that no header entry covers are
  // where its data most likely still is (its entry lost from the header).
  std::string UnindexedHint() const {
    for (const SafetensorsFile& f : store_.files()) {
      for (const auto& [begin, end] : f.unindexed()) {
        return "; " + f.path() + " has " + std::to_string(end - begin) + " bytes at offsets " +
               std::to_string(begin) + ".." + std::to_string(end) +
               " that no tensor in its header covers: its entry was probably removed";
      }
    }
    return "";
  }

  // Reports completion: tensors the model does not use (a tied lm_head kept
  // in the file, rotary caches of old exports) count as done.
  void Finish() {
    if (progress_.tensors_done == progress_.tensors_total &&
        progress_.bytes_done == progress_.bytes_total) {
      return;
    }
    progress_.bytes_done = progress_.bytes_total;
    progress_.tensors_done = progress_.tensors_total;
    progress_.tensor.clear();
    if (options_.progress) options_.progress(progress_);
  }

 private:
  // The tensor's bytes, copied when they are not aligned to the element size
  // (the kernels may load whole elements).
  const void* Aligned(const TensorInfo& t) {
    const int64_t es = DTypeSize(t.dtype);
    if (reinterpret_cast<uintptr_t>(t.data) % es == 0) return t.data;
    realigned_->emplace_back(t.data, t.data + t.size_bytes);
    return realigned_->back().data();
  }

  // Pages the tensor in (LoadOptions::prefault) and, on the way, looks at the
  // element at the start of every page: a NaN or an infinity there (a damaged
  // file, a conversion gone wrong) refuses the load with the tensor named,
  // where it would otherwise turn every logit into NaN and greedy decoding
  // into id 0. One element per 4 KiB page costs nothing beyond the paging;
  // a lone bad value elsewhere in a page is not seen.
  Status Touch(const TensorInfo& t) {
    if (!touched_.insert(&t).second) return Status::Ok();
    if (options_.prefault && t.size_bytes > 0) {
      uint8_t acc = t.data[t.size_bytes - 1];
      const int64_t es = DTypeSize(t.dtype);
      for (int64_t off = 0; off < t.size_bytes; off += 4096) {
        acc ^= t.data[off];
        if (!FiniteAt(t, off - off % es)) {
          return DataLossError("tensor '" + t.name + "' in " + t.file +
                               " holds a NaN or an infinity at byte offset " +
                               std::to_string(t.file_offset + off - off % es) +
                               ": the checkpoint is damaged or was converted wrongly");
        }
      }
      volatile uint8_t sink = acc;  // keeps the reads
      (void)sink;
    }
    progress_.bytes_done += t.size_bytes;
    progress_.tensors_done += 1;
    progress_.tensor = t.name;
    if (options_.progress) options_.progress(progress_);
    return Status::Ok();
  }

  // Whether the element at byte `off` of a floating-point tensor is finite
  // (true for other types: they have no NaN).
  static bool FiniteAt(const TensorInfo& t, int64_t off) {
    uint16_t h = 0;
    switch (t.dtype) {
      case DType::kF32: {
        float f;
        std::memcpy(&f, t.data + off, 4);
        return std::isfinite(f);
      }
      case DType::kBF16:
        std::memcpy(&h, t.data + off, 2);
        return (h & 0x7f80) != 0x7f80;
      case DType::kF16:
        std::memcpy(&h, t.data + off, 2);
        return (h & 0x7c00) != 0x7c00;
      case DType::kF8E4M3:
        return (t.data[off] & 0x7f) != 0x7f;  // e4m3fn: only NaN, no infinity
      default:
        return true;
    }
  }

  const CheckpointStore& store_;
  const ModelConfig& config_;
  const LoadOptions& options_;
  std::vector<std::vector<uint8_t>>* realigned_;
  std::vector<std::unique_ptr<Nvfp4Tensor>>* quantized_;
  int64_t quantized_count_ = 0;
  int64_t quantized_dense_bytes_ = 0;
  int64_t quantized_nvfp4_bytes_ = 0;
  int64_t copy_bytes_ = 0;
  HugePageArena* tiles_;
  int64_t tiles_budget_;
  kernels::ThreadPool* pool_;
  int64_t tile_bytes_ = 0;
  bool tiles_refused_ = false;
  LoadProgress progress_;
  std::set<const TensorInfo*> touched_;
};

}  // namespace

Result<std::unique_ptr<Model>> Model::Load(const std::string& dir, const LoadOptions& options) {
  if (!IsDirectory(dir)) return NotFoundError("model folder '" + dir + "' does not exist");
  std::unique_ptr<Model> m(new Model());
  m->dir_ = dir;
  OCTET_ASSIGN_OR_RETURN(m->config_, LoadModelConfig(dir));
  OCTET_ASSIGN_OR_RETURN(m->store_, CheckpointStore::Open(dir));
  OCTET_ASSIGN_OR_RETURN(m->backend_,
                         options.make_backend
                             ? options.make_backend()
                             : kernels::CreateAnyBackend(options.backend, {options.threads}));
  if (!m->backend_) return InvalidArgumentError("LoadOptions::make_backend made no backend");
  OCTET_RETURN_IF_ERROR(CheckResidentMemory(dir, m->store_->total_bytes(), options, *m->backend_));
  OCTET_RETURN_IF_ERROR(m->LoadWeights(options));
  m->inv_freq_.host = RopeInvFreq(m->config_);
  OCTET_RETURN_IF_ERROR(m->PlaceOnBackend());
  return m;
}

Status Model::LoadWeights(const LoadOptions& options) {
  const ModelConfig& c = config_;
  int64_t tiles_budget = options.nvfp4_tiles_max_bytes;
  if (options.nvfp4_tiles && backend_->UsesNvfp4Tiles()) {
    tile_arena_ = std::make_unique<HugePageArena>();
    if (tiles_budget < 0) tiles_budget = SpareMemoryForCopies(store_->total_bytes());
  }
  Loader ld(*store_, c, options, &realigned_, tile_arena_.get(), tiles_budget,
            backend_->host_thread_pool(), &quantized_);
  const int64_t H = c.hidden_size, hd = c.head_dim;
  // nanochat: parameter-free RMSNorms are RMSNorms with a weight of ones.
  const bool norm_weights = !c.parameter_free_norms;
  if (c.embedding_norm) embedding_norm_.host.assign(H, 1.0f);
  OCTET_ASSIGN_OR_RETURN(embed_, ld.Dense("model.embed_tokens.weight", c.vocab_size, H));
  // >>> Tensor parallelism: vocab-parallel embedding (and lm_head, below).
  vocab_begin_ = 0;
  local_vocab_ = c.vocab_size;
  auto vocab_slice = [&](const std::string& module, int64_t* begin, int64_t* count) -> Status {
    *begin = 0;
    *count = c.vocab_size;
    if (!options.shard) return Status::Ok();
    const WeightSlice s = options.shard(module, LinearRole::kVocabParallel, c.vocab_size, H);
    *begin = s.row_begin;
    *count = s.row_count < 0 ? c.vocab_size - s.row_begin : s.row_count;
    const int64_t cc = s.col_count < 0 ? H - s.col_begin : s.col_count;
    if (*begin < 0 || *count < 1 || *begin + *count > c.vocab_size || s.col_begin != 0 || cc != H) {
      return InvalidArgumentError("'" + module + "': vocab-parallel slice rows [" +
                                  std::to_string(*begin) + ", +" + std::to_string(*count) +
                                  ") of " + std::to_string(c.vocab_size) +
                                  " must be a non-empty row range with every column");
    }
    return Status::Ok();
  };
  OCTET_RETURN_IF_ERROR(vocab_slice("model.embed_tokens", &vocab_begin_, &local_vocab_));
  // On-load quantization of a tied lm_head: its global scale over the whole table.
  float tied_global = 0.0f;
  if (ld.quantizing() && c.tie_word_embeddings && embed_.format != WeightFormat::kNvfp4) {
    OCTET_ASSIGN_OR_RETURN(float amax, DenseAbsMax(embed_, backend_->host_thread_pool()));
    tied_global = Nvfp4GlobalScaleOrOne(amax);
  }
  embed_ = embed_.RowSlice(vocab_begin_, local_vocab_);
  // Decoder layer model.layers.{i}.* into L, with a dense or a mixture-of-experts MLP.
  auto load_layer = [&](int64_t i, bool moe_mlp, LayerWeights& L) -> Status {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    if (norm_weights) {
      OCTET_ASSIGN_OR_RETURN(L.input_norm.host, ld.Vector(p + "input_layernorm.weight", H));
    } else {
      L.input_norm.host.assign(H, 1.0f);
    }
    const bool b = c.attention_bias;
    float qkv_global = 0.0f;  // on-load quantization: q/k/v share one global scale
    if (ld.quantizing()) {
      OCTET_ASSIGN_OR_RETURN(qkv_global, ld.GroupGlobalScale({p + "self_attn.q_proj",
                                                              p + "self_attn.k_proj",
                                                              p + "self_attn.v_proj"}));
    }
    OCTET_ASSIGN_OR_RETURN(L.q, ld.LoadLinear(p + "self_attn.q_proj", c.num_heads * hd, H,
                                              LinearRole::kColumnParallel, b, true, qkv_global));
    OCTET_ASSIGN_OR_RETURN(L.k, ld.LoadLinear(p + "self_attn.k_proj", c.num_kv_heads * hd, H,
                                              LinearRole::kColumnParallel, b, true, qkv_global));
    OCTET_ASSIGN_OR_RETURN(L.v, ld.LoadLinear(p + "self_attn.v_proj", c.num_kv_heads * hd, H,
                                              LinearRole::kColumnParallel, b, true, qkv_global));
    if (c.qk_norm && norm_weights) {
      OCTET_ASSIGN_OR_RETURN(L.q_norm.host, ld.Vector(p + "self_attn.q_norm.weight", hd));
      OCTET_ASSIGN_OR_RETURN(L.k_norm.host, ld.Vector(p + "self_attn.k_norm.weight", hd));
    } else if (c.qk_norm) {
      L.q_norm.host.assign(hd, 1.0f);
      L.k_norm.host.assign(hd, 1.0f);
    }
    // Llama's attention_bias covers o_proj too; Qwen2's biases are q/k/v only.
    const bool o_bias = c.attention_bias && c.arch == Architecture::kLlama;
    OCTET_ASSIGN_OR_RETURN(L.o, ld.LoadLinear(p + "self_attn.o_proj", H, c.num_heads * hd,
                                              LinearRole::kRowParallel, o_bias));
    if (norm_weights) {
      OCTET_ASSIGN_OR_RETURN(L.post_norm.host, ld.Vector(p + "post_attention_layernorm.weight", H));
    } else {
      L.post_norm.host.assign(H, 1.0f);
    }
    // A gated MLP of width `F` under `prefix` ("...mlp.", "...mlp.experts.3.").
    auto gated_mlp = [&](const std::string& prefix, int64_t F, bool bias) -> Result<GatedMlp> {
      GatedMlp g;
      float gate_up_global = 0.0f;  // on-load quantization: gate/up share one global scale
      if (ld.quantizing()) {
        std::vector<std::string> gate_up = {prefix + "gate_proj"};
        if (!c.relu2_mlp) gate_up.push_back(prefix + "up_proj");
        OCTET_ASSIGN_OR_RETURN(gate_up_global, ld.GroupGlobalScale(gate_up));
      }
      OCTET_ASSIGN_OR_RETURN(g.gate, ld.LoadLinear(prefix + "gate_proj", F, H,
                                                   LinearRole::kColumnParallel, bias, true,
                                                   gate_up_global));
      if (!c.relu2_mlp) {  // nanochat's ReLU² MLP has no up projection
        OCTET_ASSIGN_OR_RETURN(g.up, ld.LoadLinear(prefix + "up_proj", F, H,
                                                   LinearRole::kColumnParallel, bias, true,
                                                   gate_up_global));
      }
      OCTET_ASSIGN_OR_RETURN(
          g.down, ld.LoadLinear(prefix + "down_proj", H, F, LinearRole::kRowParallel, bias));
      if ((!c.relu2_mlp && g.gate.weight.rows != g.up.weight.rows) ||
          g.down.weight.cols != g.gate.weight.rows) {
        return InvalidArgumentError("'" + prefix + "': sliced gate/up/down shapes do not fit");
      }
      max_mlp_width_ = std::max(max_mlp_width_, g.gate.weight.rows);
      return g;
    };
    if (!moe_mlp) {
      OCTET_ASSIGN_OR_RETURN(GatedMlp dense,
                             gated_mlp(p + "mlp.", c.intermediate_size, c.mlp_bias));
      L.gate = std::move(dense.gate);
      L.up = std::move(dense.up);
      L.down = std::move(dense.down);
    } else {
      // Mixture of experts: the router whole on every rank, the experts (and
      // the shared expert) split like dense MLPs.
      const MoeConfig& moe = c.moe;
      MoeWeights& M = L.moe;
      OCTET_ASSIGN_OR_RETURN(M.router, ld.LoadLinear(p + "mlp.gate", moe.num_experts, H,
                                                     LinearRole::kReplicated, false,
                                                     /*quantizable=*/false));
      if (moe.score_correction_bias) {
        OCTET_ASSIGN_OR_RETURN(M.score_bias,
                               ld.Vector(p + "mlp.gate.e_score_correction_bias", moe.num_experts));
      }
      M.experts.reserve(moe.num_experts);
      for (int64_t e = 0; e < moe.num_experts; ++e) {
        OCTET_ASSIGN_OR_RETURN(GatedMlp expert,
                               gated_mlp(p + "mlp.experts." + std::to_string(e) + ".",
                                         moe.expert_intermediate_size, false));
        M.experts.push_back(std::move(expert));
      }
      if (moe.shared_intermediate_size > 0) {
        OCTET_ASSIGN_OR_RETURN(
            M.shared, gated_mlp(p + "mlp.shared_experts.", moe.shared_intermediate_size, false));
      }
    }
    // Shapes a shard must keep consistent within the layer.
    if (L.q.weight.rows % hd || L.k.weight.rows % hd || L.k.weight.rows != L.v.weight.rows ||
        L.o.weight.cols != L.q.weight.rows) {
      return InvalidArgumentError("layer " + std::to_string(i) +
                                  ": sliced q/k/v/o shapes do not fit together");
    }
    return Status::Ok();
  };
  layers_.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const bool moe = !c.moe.moe_layer.empty() && c.moe.moe_layer[i];
    OCTET_RETURN_IF_ERROR(load_layer(i, moe, layers_[i]));
  }
  // Multi-token prediction (GLM-4.5 / DeepSeek-V3 layout): layer L+i holds
  // enorm, hnorm, eh_proj [H, 2H], a full decoder layer and shared_head.norm;
  // its embed_tokens and shared_head.head are copies of the main model's,
  // which are used instead.
  if (c.num_mtp_layers > 0 && !options.load_mtp) {
    OCTET_LOG(INFO) << "the checkpoint's " << c.num_mtp_layers
                    << " multi-token-prediction layer(s) (model.layers." << c.num_layers
                    << ".*) are not loaded: no speculative decoding was asked for";
  }
  if (options.load_mtp) {
    if (c.num_mtp_layers == 0) {
      return InvalidArgumentError(
          "the model has no multi-token-prediction layer "
          "(num_nextn_predict_layers is 0): use --speculative ngram");
    }
    mtp_.resize(c.num_mtp_layers);
    for (int64_t m = 0; m < c.num_mtp_layers; ++m) {
      const int64_t i = c.num_layers + m;
      const std::string p = "model.layers." + std::to_string(i) + ".";
      MtpLayer& M = mtp_[m];
      OCTET_ASSIGN_OR_RETURN(M.enorm.host, ld.Vector(p + "enorm.weight", H));
      OCTET_ASSIGN_OR_RETURN(M.hnorm.host, ld.Vector(p + "hnorm.weight", H));
      OCTET_ASSIGN_OR_RETURN(M.head_norm.host, ld.Vector(p + "shared_head.norm.weight", H));
      OCTET_ASSIGN_OR_RETURN(
          M.eh_proj, ld.LoadLinear(p + "eh_proj", H, 2 * H, LinearRole::kReplicated, false));
      OCTET_RETURN_IF_ERROR(load_layer(i, c.moe.num_experts > 0, M.layer));
    }
  }
  if (norm_weights) {
    OCTET_ASSIGN_OR_RETURN(final_norm_.host, ld.Vector("model.norm.weight", H));
  } else {
    final_norm_.host.assign(H, 1.0f);
  }
  if (c.tie_word_embeddings) {
    lm_head_.name = "lm_head (tied to model.embed_tokens)";
    lm_head_.weight = embed_;  // the same vocabulary rows
    if (tied_global > 0.0f) {
      // The gather keeps the exact table; the logits read an NVFP4 copy.
      OCTET_ASSIGN_OR_RETURN(lm_head_.weight,
                             ld.QuantizeWeight("lm_head (tied)", embed_, tied_global, true));
      if (lm_head_.weight.format == WeightFormat::kNvfp4) {
        lm_head_.name = "lm_head (an NVFP4 copy of model.embed_tokens)";
        // The largest matrix of a small model: its decode reads the tiles too.
        lm_head_.weight = ld.WithTiles("lm_head (tied)", lm_head_.weight);
      }
    }
  } else {
    int64_t begin = 0, count = 0;
    OCTET_RETURN_IF_ERROR(vocab_slice("lm_head", &begin, &count));
    if (begin != vocab_begin_ || count != local_vocab_) {
      return InvalidArgumentError("lm_head and model.embed_tokens must hold the same vocabulary "
                                  "rows on a rank");
    }
    OCTET_ASSIGN_OR_RETURN(
        lm_head_, ld.LoadLinear("lm_head", c.vocab_size, H, LinearRole::kVocabParallel, false));
  }
  lm_head_.role = local_vocab_ == c.vocab_size ? LinearRole::kReplicated : LinearRole::kVocabParallel;
  ld.Finish();
  for (const SafetensorsFile& f : store_->files()) {
    for (const auto& [begin, end] : f.unindexed()) {
      OCTET_LOG(WARNING) << f.path() << ": bytes " << begin << ".." << end
                         << " belong to no tensor in the header (the file is not well formed; "
                            "every tensor the model needs was found)";
    }
  }
  if (ld.quantized_count() > 0) {
    quantized_bytes_saved_ =
        ld.quantized_dense_bytes() - ld.quantized_nvfp4_bytes() - ld.copy_bytes();
    auto mib = [](int64_t bytes) {
      char s[32];
      std::snprintf(s, sizeof s, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
      return std::string(s);
    };
    OCTET_LOG(INFO) << "--quantize nvfp4: " << ld.quantized_count()
                    << " weight matrices quantized to NVFP4 at load, "
                    << mib(ld.quantized_dense_bytes()) << " -> " << mib(ld.quantized_nvfp4_bytes())
                    << (ld.copy_bytes() > 0 ? ", plus a " + mib(ld.copy_bytes()) +
                                                  " NVFP4 copy of the tied embedding for lm_head"
                                            : std::string())
                    << ": " << mib(quantized_bytes_saved_) << " saved";
  }
  if (ld.tile_bytes() > 0) {
    OCTET_LOG(INFO) << "NVFP4 weights: a tile copy for the backend's integer decode, "
                    << MiB(ld.tile_bytes()) << " MiB";
  }
  local_heads_ = layers_.empty() ? c.num_heads : layers_[0].q.weight.rows / hd;
  local_kv_heads_ = layers_.empty() ? c.num_kv_heads : layers_[0].k.weight.rows / hd;
  if (local_kv_heads_ == 0 || local_heads_ % local_kv_heads_ != 0) {
    return InvalidArgumentError("sharded heads: " + std::to_string(local_heads_) +
                                " query heads cannot share " + std::to_string(local_kv_heads_) +
                                " kv heads");
  }
  return Status::Ok();
}

}  // namespace octet::engine
