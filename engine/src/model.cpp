#include "octet/engine/model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>

#include "octet/base/deadline.h"
#include "octet/base/file_util.h"
#include "octet/base/huge_page_arena.h"
#include "octet/base/log.h"
#include "octet/base/mem_info.h"

namespace octet::engine {

using kernels::WeightFormat;
using kernels::WeightMatrix;

KvCache::KvCache(int64_t layers, int64_t kv_heads, int64_t head_dim, int slots, int64_t capacity,
                 kernels::KvDtype dtype)
    : layers_(layers),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      capacity_(capacity),
      slots_(slots),
      dtype_(dtype),
      data_(static_cast<size_t>(layers * slots * 2 * capacity * kv_heads * head_dim *
                                kernels::KvDtypeBytes(dtype))),
      lengths_(slots, 0) {}

void KvCache::Store(int64_t layer, int slot, int64_t first_pos, int64_t n, const float* k,
                    const float* v) {
  const int64_t hd = head_dim_;
  const int64_t row = kv_heads_ * hd;  // one position of the input: every head
  uint8_t* kd = data_.data() + Offset(layer, slot, 0);
  uint8_t* vd = data_.data() + Offset(layer, slot, 1);
  // Head h of position p goes to element (h * capacity + p) * head_dim.
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < kv_heads_; ++h) {
      const int64_t dst = (h * capacity_ + first_pos + t) * hd;
      const float* ks = k + t * row + h * hd;
      const float* vs = v + t * row + h * hd;
      if (dtype_ == kernels::KvDtype::kF32) {
        std::memcpy(reinterpret_cast<float*>(kd) + dst, ks, hd * sizeof(float));
        std::memcpy(reinterpret_cast<float*>(vd) + dst, vs, hd * sizeof(float));
        continue;
      }
      // Half: saturate at the largest finite half instead of overflowing to inf.
      constexpr float kMaxHalf = 65504.0f;
      uint16_t* kh = reinterpret_cast<uint16_t*>(kd) + dst;
      uint16_t* vh = reinterpret_cast<uint16_t*>(vd) + dst;
      for (int64_t c = 0; c < hd; ++c) {
        kh[c] = kernels::F32ToF16(std::clamp(ks[c], -kMaxHalf, kMaxHalf));
        vh[c] = kernels::F32ToF16(std::clamp(vs[c], -kMaxHalf, kMaxHalf));
      }
    }
  }
}

const float* ForwardOutput::Last(size_t chunk) const {
  const int64_t end = chunk + 1 < row_begin.size() ? row_begin[chunk + 1]
                                                   : static_cast<int64_t>(logits.size()) / vocab;
  return Row(end - 1);
}

// ---- loading ----------------------------------------------------------------

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

class Loader {
 public:
  // `realigned`: copies of misaligned tensors the model keeps; `tiles`: where
  // NVFP4 tile copies go, null when the backend does not read them
  // (KernelBackend::UsesNvfp4Tiles, LoadOptions::nvfp4_tiles), at most
  // `tiles_budget` bytes of them; `pool`: the threads that write them (may be
  // null).
  Loader(const CheckpointStore& store, const ModelConfig& config, const LoadOptions& options,
         std::vector<std::vector<uint8_t>>* realigned, HugePageArena* tiles, int64_t tiles_budget,
         kernels::ThreadPool* pool)
      : store_(store),
        config_(config),
        options_(options),
        realigned_(realigned),
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
    const std::string name = Stored(hf_name);
    const TensorInfo* t = store_.Find(name);
    if (!t) {
      return NotFoundError("tensor '" + name + "' (expected shape " + ShapeString(shape) +
                           ") is missing from the checkpoint");
    }
    if (t->shape != shape) {
      return InvalidArgumentError("tensor '" + name + "' in " + t->file + " has shape " +
                                  t->ShapeString() + " but " + ShapeString(shape) +
                                  " was expected");
    }
    Touch(*t);
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
    Touch(*t);
    float v;
    std::memcpy(&v, t->data, 4);
    if (!(v > 0.0f) || !std::isfinite(v)) {
      return InvalidArgumentError("tensor '" + name + "' holds " + std::to_string(v) +
                                  "; a scale must be positive and finite");
    }
    return v;
  }

  // A linear layer's weight [out, in] (dense or NVFP4), sliced for this rank.
  Result<Linear> LoadLinear(const std::string& module, int64_t out, int64_t in, LinearRole role,
                            bool bias) {
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
      if (const TensorInfo* is = Find(module + ".input_scale")) Touch(*is);
      l.weight = WeightMatrix::Nvfp4(packed->data, scales->data, global, out, in);
    } else {
      if (!t) {
        return NotFoundError("tensor '" + wname + "' (expected shape " +
                             ShapeString(quantized ? std::vector<int64_t>{out, in / 2}
                                                   : std::vector<int64_t>{out, in}) +
                             (quantized ? " U8 NVFP4" : "") + ") is missing from the checkpoint");
      }
      OCTET_ASSIGN_OR_RETURN(l.weight, Dense(module + ".weight", out, in));
    }
    if (bias) {
      OCTET_ASSIGN_OR_RETURN(l.bias, Vector(module + ".bias", out));
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
        l.bias =
            std::vector<float>(l.bias.begin() + s.row_begin, l.bias.begin() + s.row_begin + rc);
      }
    }
    // The tile copy for single-row decode, of this rank's slice only.
    if (tiles_ && !tiles_refused_ && kernels::CanTileNvfp4(l.weight)) {
      const int64_t bytes = kernels::Nvfp4TilesBytes(l.weight);
      if (tile_bytes_ + bytes > tiles_budget_) {
        tiles_refused_ = true;
        OCTET_LOG(WARNING) << "the NVFP4 tile copy stops at " << MiB(tile_bytes_)
                           << " MiB, its budget of " << MiB(tiles_budget_)
                           << " MiB (LoadOptions::nvfp4_tiles_max_bytes): '" << module
                           << "' and later layers decode row-major";
      } else if (uint8_t* mem = tiles_->Allocate(static_cast<size_t>(bytes))) {
        l.weight = kernels::TileNvfp4(l.weight, mem, pool_);
        tile_bytes_ += bytes;
      } else {
        tiles_refused_ = true;
        OCTET_LOG(WARNING) << "no memory for the NVFP4 tile copy of '" << module
                           << "' and later layers: they decode row-major";
      }
    }
    return l;
  }

  int64_t tile_bytes() const { return tile_bytes_; }

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

  void Touch(const TensorInfo& t) {
    if (!touched_.insert(&t).second) return;
    if (options_.prefault && t.size_bytes > 0) {
      uint8_t acc = t.data[t.size_bytes - 1];
      for (int64_t off = 0; off < t.size_bytes; off += 4096) acc ^= t.data[off];
      volatile uint8_t sink = acc;  // keeps the reads
      (void)sink;
    }
    progress_.bytes_done += t.size_bytes;
    progress_.tensors_done += 1;
    progress_.tensor = t.name;
    if (options_.progress) options_.progress(progress_);
  }

  const CheckpointStore& store_;
  const ModelConfig& config_;
  const LoadOptions& options_;
  std::vector<std::vector<uint8_t>>* realigned_;
  HugePageArena* tiles_;
  int64_t tiles_budget_;
  kernels::ThreadPool* pool_;
  int64_t tile_bytes_ = 0;
  bool tiles_refused_ = false;
  LoadProgress progress_;
  std::set<const TensorInfo*> touched_;
};

}  // namespace

struct Model::Scratch {
  std::vector<float> x, xn, q, k, v, attn, proj, gate, up, rows, local_logits;
  std::vector<int32_t> ids, positions;
  void Grow(int64_t t, const Model& m) {
    const ModelConfig& c = m.config_;
    auto grow = [](std::vector<float>& v, int64_t n) {
      if (static_cast<int64_t>(v.size()) < n) v.resize(n);
    };
    const int64_t qd = m.local_heads_ * c.head_dim, kvd = m.local_kv_heads_ * c.head_dim;
    const int64_t ffn = m.layers_.empty() ? 0 : m.layers_[0].gate.weight.rows;
    grow(x, t * c.hidden_size);
    grow(xn, t * c.hidden_size);
    grow(proj, t * c.hidden_size);
    grow(q, t * qd);
    grow(attn, t * qd);
    grow(k, t * kvd);
    grow(v, t * kvd);
    grow(gate, t * ffn);
    grow(up, t * ffn);
  }
};

Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::Load(const std::string& dir, const LoadOptions& options) {
  if (!IsDirectory(dir)) return NotFoundError("model folder '" + dir + "' does not exist");
  std::unique_ptr<Model> m(new Model());
  m->dir_ = dir;
  OCTET_ASSIGN_OR_RETURN(m->config_, LoadModelConfig(dir));
  OCTET_ASSIGN_OR_RETURN(m->store_, CheckpointStore::Open(dir));
  OCTET_ASSIGN_OR_RETURN(m->backend_, kernels::CreateBackend(options.backend, {options.threads}));
  OCTET_RETURN_IF_ERROR(m->LoadWeights(options));
  m->inv_freq_ = RopeInvFreq(m->config_);
  m->scratch_ = std::make_unique<Scratch>();
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
            backend_->host_thread_pool());
  const int64_t H = c.hidden_size, hd = c.head_dim;
  // nanochat: parameter-free RMSNorms are RMSNorms with a weight of ones.
  const bool norm_weights = !c.parameter_free_norms;
  if (c.embedding_norm) embedding_norm_.assign(H, 1.0f);
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
  embed_ = embed_.RowSlice(vocab_begin_, local_vocab_);
  layers_.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& L = layers_[i];
    if (norm_weights) {
      OCTET_ASSIGN_OR_RETURN(L.input_norm, ld.Vector(p + "input_layernorm.weight", H));
    } else {
      L.input_norm.assign(H, 1.0f);
    }
    const bool b = c.attention_bias;
    OCTET_ASSIGN_OR_RETURN(L.q, ld.LoadLinear(p + "self_attn.q_proj", c.num_heads * hd, H,
                                              LinearRole::kColumnParallel, b));
    OCTET_ASSIGN_OR_RETURN(L.k, ld.LoadLinear(p + "self_attn.k_proj", c.num_kv_heads * hd, H,
                                              LinearRole::kColumnParallel, b));
    OCTET_ASSIGN_OR_RETURN(L.v, ld.LoadLinear(p + "self_attn.v_proj", c.num_kv_heads * hd, H,
                                              LinearRole::kColumnParallel, b));
    if (c.qk_norm && norm_weights) {
      OCTET_ASSIGN_OR_RETURN(L.q_norm, ld.Vector(p + "self_attn.q_norm.weight", hd));
      OCTET_ASSIGN_OR_RETURN(L.k_norm, ld.Vector(p + "self_attn.k_norm.weight", hd));
    } else if (c.qk_norm) {
      L.q_norm.assign(hd, 1.0f);
      L.k_norm.assign(hd, 1.0f);
    }
    // Llama's attention_bias covers o_proj too; Qwen2's biases are q/k/v only.
    const bool o_bias = c.attention_bias && c.arch == Architecture::kLlama;
    OCTET_ASSIGN_OR_RETURN(L.o, ld.LoadLinear(p + "self_attn.o_proj", H, c.num_heads * hd,
                                              LinearRole::kRowParallel, o_bias));
    if (norm_weights) {
      OCTET_ASSIGN_OR_RETURN(L.post_norm, ld.Vector(p + "post_attention_layernorm.weight", H));
    } else {
      L.post_norm.assign(H, 1.0f);
    }
    const bool mb = c.mlp_bias;
    OCTET_ASSIGN_OR_RETURN(L.gate, ld.LoadLinear(p + "mlp.gate_proj", c.intermediate_size, H,
                                                 LinearRole::kColumnParallel, mb));
    if (!c.relu2_mlp) {  // nanochat's ReLU² MLP has no up projection
      OCTET_ASSIGN_OR_RETURN(L.up, ld.LoadLinear(p + "mlp.up_proj", c.intermediate_size, H,
                                                 LinearRole::kColumnParallel, mb));
    }
    OCTET_ASSIGN_OR_RETURN(L.down, ld.LoadLinear(p + "mlp.down_proj", H, c.intermediate_size,
                                                 LinearRole::kRowParallel, mb));
    // Shapes a shard must keep consistent within the layer.
    if (L.q.weight.rows % hd || L.k.weight.rows % hd || L.k.weight.rows != L.v.weight.rows ||
        L.o.weight.cols != L.q.weight.rows ||
        (!c.relu2_mlp && L.gate.weight.rows != L.up.weight.rows) ||
        L.down.weight.cols != L.gate.weight.rows) {
      return InvalidArgumentError("layer " + std::to_string(i) +
                                  ": sliced q/k/v/o or gate/up/down shapes do not fit together");
    }
  }
  if (norm_weights) {
    OCTET_ASSIGN_OR_RETURN(final_norm_, ld.Vector("model.norm.weight", H));
  } else {
    final_norm_.assign(H, 1.0f);
  }
  if (c.tie_word_embeddings) {
    lm_head_.name = "lm_head (tied to model.embed_tokens)";
    lm_head_.weight = embed_;  // the same vocabulary rows
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
  if (ld.tile_bytes() > 0) {
    OCTET_LOG(INFO) << "NVFP4 weights: a tile copy for single-row decode (AVX512-VNNI), "
                    << MiB(ld.tile_bytes()) << " MiB";
  }
  local_heads_ = layers_.empty() ? c.num_heads : layers_[0].q.weight.rows / hd;
  local_kv_heads_ = layers_.empty() ? c.num_kv_heads : layers_[0].k.weight.rows / hd;
  if (local_kv_heads_ == 0 || local_heads_ % local_kv_heads_ != 0) {
    return InvalidArgumentError("sharded heads: " + std::to_string(local_heads_) +
                                " query heads cannot share " + std::to_string(local_kv_heads_) +
                                " kv heads");
  }
  for (const Linear* l : {&lm_head_}) {
    if (!backend_->supports(l->weight.format)) {
      return UnimplementedError("backend " + std::string(backend_->name()) + " cannot run " +
                                std::string(kernels::WeightFormatName(l->weight.format)));
    }
  }
  return Status::Ok();
}

int64_t Model::WeightBytesPerToken() const {
  int64_t bytes = lm_head_.weight.BytesRead() + (int64_t)final_norm_.size() * 4;
  for (const LayerWeights& L : layers_) {
    for (const Linear* l : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) {
      bytes += l->weight.BytesRead() + static_cast<int64_t>(l->bias.size()) * 4;
    }
    bytes += static_cast<int64_t>(L.input_norm.size() + L.post_norm.size() + L.q_norm.size() +
                                  L.k_norm.size()) *
             4;
  }
  return bytes;
}

std::string Model::WeightFormatSummary() const {
  std::set<std::string> formats;
  auto add = [&](const WeightMatrix& w) {
    if (w.rows == 0) return;  // absent (nanochat's up_proj)
    formats.insert(std::string(kernels::WeightFormatName(w.format)));
  };
  add(embed_);
  add(lm_head_.weight);
  for (const LayerWeights& L : layers_) {
    for (const Linear* l : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) add(l->weight);
  }
  std::string s;
  if (formats.count("NVFP4")) s = "NVFP4";
  for (const auto& f : formats) {
    if (f == "NVFP4") continue;
    s += (s.empty() ? "" : "+") + f;
  }
  return s;
}

KvCache Model::NewKvCache(int slots, int64_t capacity, kernels::KvDtype dtype) const {
  return KvCache(config_.num_layers, local_kv_heads_, config_.head_dim, slots, capacity, dtype);
}

// ---- forward ----------------------------------------------------------------

namespace {

// Where a decode forward's time goes, for tuning: with OCTET_PROFILE_DECODE=1
// in the environment, forwards of at most 8 tokens time their op groups (wall
// clock between marks; the backend ops are synchronous) and every 64 forwards
// of one token count log the mean ms per forward. Off (one branch per mark)
// otherwise.
class DecodeProfile {
 public:
  enum Op { kEmbed, kNorms, kQkv, kAttention, kO, kAllReduce, kGateUp, kDown, kLmHead, kOps };

  explicit DecodeProfile(int64_t tokens) : tokens_(tokens) {
    static const bool enabled = [] {
      const char* e = std::getenv("OCTET_PROFILE_DECODE");
      return e != nullptr && e[0] != '\0' && e[0] != '0';
    }();
    on_ = enabled && tokens >= 1 && tokens <= kMaxTokens;
    if (on_) last_ = NowNs();
  }
  ~DecodeProfile() {
    if (!on_) return;
    static std::mutex mu;
    static Totals totals[kMaxTokens + 1];
    std::lock_guard<std::mutex> lock(mu);
    Totals& t = totals[tokens_];
    for (int i = 0; i < kOps; ++i) t.ns[i] += ns_[i];
    if (++t.forwards < kReportEvery) return;
    static const char* kNames[kOps] = {"embed",     "norms+rope+add", "qkv",  "attention", "o",
                                       "allreduce", "gate_up+silu",   "down", "lm_head"};
    std::string line = "decode profile, " + std::to_string(tokens_) + " tokens, ms/forward:";
    int64_t total = 0;
    for (int i = 0; i < kOps; ++i) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), " %s %.2f", kNames[i], t.ns[i] * 1e-6 / t.forwards);
      line += buf;
      total += t.ns[i];
    }
    char buf[64];
    std::snprintf(buf, sizeof(buf), " = %.2f", total * 1e-6 / t.forwards);
    OCTET_LOG(INFO) << line << buf;
    t = Totals();
  }
  // The time since the previous mark goes to `op`.
  void Mark(Op op) {
    if (!on_) return;
    const int64_t now = NowNs();
    ns_[op] += now - last_;
    last_ = now;
  }

 private:
  static constexpr int64_t kMaxTokens = 8;
  static constexpr int64_t kReportEvery = 64;
  struct Totals {
    int64_t ns[kOps] = {};
    int64_t forwards = 0;
  };
  int64_t tokens_;
  bool on_ = false;
  int64_t last_ = 0;
  int64_t ns_[kOps] = {};
};

}  // namespace

Status Model::Forward(const std::vector<SequenceChunk>& batch, KvCache& cache, ForwardOutput* out,
                      const ForwardHooks& hooks) {
  OCTET_RETURN_IF_ERROR(ForwardUncapped(batch, cache, out, hooks));
  const float cap = config_.logit_softcap;
  if (cap > 0) {  // nanochat: logits = cap * tanh(z / cap)
    for (float& z : out->logits) z = cap * std::tanh(z / cap);
  }
  return Status::Ok();
}

Status Model::ForwardUncapped(const std::vector<SequenceChunk>& batch, KvCache& cache,
                              ForwardOutput* out, const ForwardHooks& hooks) {
  const ModelConfig& c = config_;
  if (batch.empty()) return InvalidArgumentError("empty batch");
  if (cache.layers() != c.num_layers || cache.kv_heads() != local_kv_heads_ ||
      cache.head_dim() != c.head_dim) {
    return InvalidArgumentError("KV cache shape does not match the model");
  }
  // Validate everything before touching the cache.
  int64_t T = 0;
  std::set<int> slots;
  for (size_t s = 0; s < batch.size(); ++s) {
    const SequenceChunk& ch = batch[s];
    const std::string where =
        "sequence " + std::to_string(s) + " (slot " + std::to_string(ch.slot) + ")";
    if (ch.slot < 0 || ch.slot >= cache.num_slots()) {
      return InvalidArgumentError(where + ": slot out of range (cache has " +
                                  std::to_string(cache.num_slots()) + " slots)");
    }
    if (!slots.insert(ch.slot).second)
      return InvalidArgumentError(where + ": slot used twice in one batch");
    if (ch.tokens.empty()) return InvalidArgumentError(where + ": no tokens");
    if (ch.start_pos < 0 || ch.start_pos > cache.length(ch.slot)) {
      return InvalidArgumentError(where + ": start position " + std::to_string(ch.start_pos) +
                                  " but the cache holds " + std::to_string(cache.length(ch.slot)) +
                                  " positions");
    }
    const int64_t end = ch.start_pos + static_cast<int64_t>(ch.tokens.size());
    if (end > cache.capacity()) {
      return OutOfRangeError(where + ": " + std::to_string(end) +
                             " positions do not fit the KV cache capacity of " +
                             std::to_string(cache.capacity()));
    }
    for (size_t i = 0; i < ch.tokens.size(); ++i) {
      if (ch.tokens[i] < 0 || ch.tokens[i] >= c.vocab_size) {
        return InvalidArgumentError(where + ": token id " + std::to_string(ch.tokens[i]) +
                                    " at position " + std::to_string(ch.start_pos + i) +
                                    " is out of range (vocab size " + std::to_string(c.vocab_size) +
                                    ")");
      }
    }
    T += static_cast<int64_t>(ch.tokens.size());
  }

  kernels::KernelBackend& be = *backend_;
  Scratch& S = *scratch_;
  DecodeProfile prof(T);
  S.Grow(T, *this);
  S.ids.resize(T);
  S.positions.resize(T);
  std::vector<int64_t> first(batch.size());
  {
    int64_t r = 0;
    for (size_t s = 0; s < batch.size(); ++s) {
      first[s] = r;
      for (size_t i = 0; i < batch[s].tokens.size(); ++i, ++r) {
        S.ids[r] = batch[s].tokens[i];
        S.positions[r] = static_cast<int32_t>(batch[s].start_pos + i);
      }
    }
  }
  const int64_t H = c.hidden_size, hd = c.head_dim;
  const int64_t qd = local_heads_ * hd, kvd = local_kv_heads_ * hd;
  const float eps = c.rms_norm_eps;
  float* x = S.x.data();    // residual stream [T, H]
  float* xn = S.xn.data();  // normed input of a block [T, H]
  float* q = S.q.data();    // [T, heads, hd]
  float* k = S.k.data();    // [T, kv_heads, hd]
  float* v = S.v.data();
  float* attn = S.attn.data();  // [T, heads * hd]
  float* proj = S.proj.data();  // o_proj / down_proj output [T, H]

  auto add_bias = [&](float* y, int64_t ld, const std::vector<float>& bias) {
    if (bias.empty()) return;
    for (int64_t t = 0; t < T; ++t) be.Add(y + t * ld, bias.data(), ld, y + t * ld);
  };

  if (local_vocab_ == c.vocab_size) {
    be.Embedding(embed_, S.ids.data(), T, x);
  } else {
    // >>> Tensor parallelism: vocab-parallel embedding. This rank fills the rows
    // of the ids it holds and zeros elsewhere; the all-reduce completes every row.
    if (!hooks.all_reduce || !hooks.gather_logits) {
      return FailedPreconditionError(
          "the model holds a vocab-parallel shard: Forward needs the all_reduce and "
          "gather_logits hooks");
    }
    std::memset(x, 0, static_cast<size_t>(T * H) * sizeof(float));
    for (int64_t t = 0; t < T; ++t) {
      const int32_t local = S.ids[t] - static_cast<int32_t>(vocab_begin_);
      if (local >= 0 && local < local_vocab_) be.Embedding(embed_, &local, 1, x + t * H);
    }
    OCTET_RETURN_IF_ERROR(hooks.all_reduce(x, T * H));
  }
  std::vector<kernels::AttentionSequence> seqs(batch.size());
  if (c.embedding_norm) be.RmsNorm(x, embedding_norm_.data(), eps, T, H, H, x);  // nanochat
  prof.Mark(DecodeProfile::kEmbed);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& L = layers_[l];
    // ---- attention block: x += o_proj(attention(rope(q), rope(k), v)) ----
    be.RmsNorm(x, L.input_norm.data(), eps, T, H, H, xn);
    prof.Mark(DecodeProfile::kNorms);
    const kernels::KernelBackend::MatmulOutput qkv[3] = {
        {&L.q.weight, q, qd}, {&L.k.weight, k, kvd}, {&L.v.weight, v, kvd}};
    be.MatmulMulti(xn, T, H, qkv, 3);
    prof.Mark(DecodeProfile::kQkv);
    add_bias(q, qd, L.q.bias);
    add_bias(k, kvd, L.k.bias);
    add_bias(v, kvd, L.v.bias);
    // QK-norm: RMSNorm over each head's features, before RoPE (Qwen3) or after (nanochat).
    if (c.qk_norm && !c.qk_norm_after_rope) {
      be.RmsNorm(q, L.q_norm.data(), eps, T * local_heads_, hd, hd, q);
      be.RmsNorm(k, L.k_norm.data(), eps, T * local_kv_heads_, hd, hd, k);
    }
    be.Rope(q, T, qd, local_heads_, hd, S.positions.data(), inv_freq_.data());
    be.Rope(k, T, kvd, local_kv_heads_, hd, S.positions.data(), inv_freq_.data());
    if (c.qk_norm && c.qk_norm_after_rope) {
      be.RmsNorm(q, L.q_norm.data(), eps, T * local_heads_, hd, hd, q);
      be.RmsNorm(k, L.k_norm.data(), eps, T * local_kv_heads_, hd, hd, k);
    }
    prof.Mark(DecodeProfile::kNorms);
    for (size_t s = 0; s < batch.size(); ++s) {
      const SequenceChunk& ch = batch[s];
      const int64_t n = static_cast<int64_t>(ch.tokens.size());
      cache.Store(l, ch.slot, ch.start_pos, n, k + first[s] * kvd, v + first[s] * kvd);
      seqs[s] = {first[s],
                 n,
                 cache.k(l, ch.slot),
                 cache.v(l, ch.slot),
                 S.positions.data() + first[s],
                 cache.dtype(),
                 cache.position_stride(),
                 cache.head_stride()};
    }
    kernels::AttentionArgs a;
    a.q = q;
    a.q_row_stride = qd;
    a.out = attn;
    a.out_row_stride = qd;
    a.n_heads = local_heads_;
    a.n_kv_heads = local_kv_heads_;
    a.head_dim = hd;
    a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    a.sequences = seqs.data();
    a.n_sequences = static_cast<int64_t>(seqs.size());
    be.Attention(a);
    prof.Mark(DecodeProfile::kAttention);
    be.Matmul(attn, T, qd, L.o.weight, proj, H, false);
    prof.Mark(DecodeProfile::kO);
    // >>> Tensor parallelism: o_proj is row-parallel; each rank holds a partial sum.
    if (hooks.all_reduce) OCTET_RETURN_IF_ERROR(hooks.all_reduce(proj, T * H));
    prof.Mark(DecodeProfile::kAllReduce);
    add_bias(proj, H, L.o.bias);  // a row-parallel bias is added once, after the sum
    be.Add(x, proj, T * H, x);

    // ---- MLP block: x += down_proj(silu(gate_proj(n)) * up_proj(n)) ----
    // (nanochat: x += c_proj(relu(c_fc(n))²), c_fc loaded as gate_proj.)
    const int64_t F = L.gate.weight.rows;
    be.RmsNorm(x, L.post_norm.data(), eps, T, H, H, xn);
    prof.Mark(DecodeProfile::kNorms);
    if (c.relu2_mlp) {
      be.Matmul(xn, T, H, L.gate.weight, S.gate.data(), F, false);
      add_bias(S.gate.data(), F, L.gate.bias);
      float* h = S.gate.data();
      for (int64_t i = 0; i < T * F; ++i) h[i] = h[i] > 0.0f ? h[i] * h[i] : 0.0f;
    } else {
      const kernels::KernelBackend::MatmulOutput gate_up[2] = {{&L.gate.weight, S.gate.data(), F},
                                                               {&L.up.weight, S.up.data(), F}};
      be.MatmulMulti(xn, T, H, gate_up, 2);
      add_bias(S.gate.data(), F, L.gate.bias);
      add_bias(S.up.data(), F, L.up.bias);
      be.SiluMul(S.gate.data(), S.up.data(), T, F, F, S.gate.data());
    }
    prof.Mark(DecodeProfile::kGateUp);
    be.Matmul(S.gate.data(), T, F, L.down.weight, proj, H, false);
    prof.Mark(DecodeProfile::kDown);
    // >>> Tensor parallelism: down_proj is row-parallel; each rank holds a partial sum.
    if (hooks.all_reduce) OCTET_RETURN_IF_ERROR(hooks.all_reduce(proj, T * H));
    prof.Mark(DecodeProfile::kAllReduce);
    add_bias(proj, H, L.down.bias);
    be.Add(x, proj, T * H, x);
    prof.Mark(DecodeProfile::kNorms);
  }
  for (size_t s = 0; s < batch.size(); ++s) {
    cache.set_length(batch[s].slot,
                     batch[s].start_pos + static_cast<int64_t>(batch[s].tokens.size()));
  }

  // Logits only for the rows that need them (the last token of each chunk,
  // or all of a chunk's tokens when asked).
  std::vector<int64_t> rows;
  out->row_begin.assign(batch.size(), 0);
  for (size_t s = 0; s < batch.size(); ++s) {
    out->row_begin[s] = static_cast<int64_t>(rows.size());
    const int64_t n = static_cast<int64_t>(batch[s].tokens.size());
    for (int64_t i = batch[s].all_logits ? 0 : n - 1; i < n; ++i) rows.push_back(first[s] + i);
  }
  const int64_t R = static_cast<int64_t>(rows.size());
  if (static_cast<int64_t>(S.rows.size()) < R * H) S.rows.resize(R * H);
  for (int64_t r = 0; r < R; ++r)
    std::memcpy(S.rows.data() + r * H, x + rows[r] * H, H * sizeof(float));
  be.RmsNorm(S.rows.data(), final_norm_.data(), eps, R, H, H, S.rows.data());
  out->vocab = c.vocab_size;
  out->logits.resize(R * out->vocab);
  if (local_vocab_ == c.vocab_size) {
    be.Matmul(S.rows.data(), R, H, lm_head_.weight, out->logits.data(), out->vocab, false);
    prof.Mark(DecodeProfile::kLmHead);
    return Status::Ok();
  }
  // >>> Tensor parallelism: vocab-parallel lm_head; every rank's rows gathered.
  if (static_cast<int64_t>(S.local_logits.size()) < R * local_vocab_) {
    S.local_logits.resize(R * local_vocab_);
  }
  be.Matmul(S.rows.data(), R, H, lm_head_.weight, S.local_logits.data(), local_vocab_, false);
  Status gathered = hooks.gather_logits(S.local_logits.data(), R, local_vocab_, out->logits.data());
  prof.Mark(DecodeProfile::kLmHead);
  return gathered;
}

}  // namespace octet::engine
