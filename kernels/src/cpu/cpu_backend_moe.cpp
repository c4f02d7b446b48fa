// CpuBackend's mixture-of-experts ops (backend.h, MatmulGrouped and
// MatmulScatterAdd): all the chosen experts of a decode step in one pass of
// the thread pool per projection, through the same ISA kernels Matmul uses.
//
// Why: at c1 a Qwen3-30B-A3B-shaped layer runs 8 experts, each 2 x 768 x 2048
// for gate/up and 2048 x 768 for down, about 1 MB of NVFP4 weights per expert.
// One Matmul call per expert and projection pays each call's fixed costs
// (packing the activation row, waking the pool, every task starting its
// stream cold, the join) 16 times a layer for about 0.1 ms of memory time
// each. Here gate/up of every expert are one pool pass (the shared row packed
// once) and every down projection is a second one whose tasks own a range of
// output features across all the experts, adding the router-weighted rows
// into the tokens' rows as they go (no separate scatter, no per-expert output
// buffer).
//
// Results: each product's rows come from the kernels Matmul picks for the
// same shape (the NVFP4 tile decode, the register GEMV), whose per-row sums
// do not depend on how rows are split into tasks; the scatter adds in product
// then row order with ScatterAddRows's expression. So both ops give exactly
// what a Matmul per product (and a ScatterAddRows) gives.
#include <algorithm>
#include <cstring>

#include "cpu/cpu_backend.h"

namespace octet::kernels::cpu {
namespace {

int64_t DivUp(int64_t a, int64_t b) { return (a + b - 1) / b; }

// From 5 rows a BF16 product may take the matrix unit's batched decode
// (cpu_backend.cpp, kGemvPackedMinRows), which a Matmul of its own packs for;
// such products, and any of more than kGemvMaxRows rows (prefill: compute-
// bound, one call each is as good), are not grouped.
constexpr int64_t kGroupedBf16MaxRows = 4;

bool Groupable(const IsaKernels& isa, const WeightMatrix& w, int64_t m) {
  if (m < 1 || m > kGemvMaxRows || w.cols == 0) return false;
  if (w.format == WeightFormat::kBF16 && isa.gemv_packed && m > kGroupedBf16MaxRows) return false;
  return true;
}

bool HasTiles(const IsaKernels& isa, const WeightMatrix& w) {
  return w.format == WeightFormat::kNvfp4 && w.tiles != nullptr && isa.gemv_nvfp4_tiles &&
         w.cols % kNvfp4TileCols == 0;
}

// Output features per task: whole 16-row tile groups for a tiled matrix,
// whole 4-row GEMV groups otherwise; about four tasks a thread, at most 256
// rows, so a task streams one run of each matrix it reads.
int64_t GroupedRowsPerTask(int64_t rows, int threads, bool tiles) {
  const int64_t step = tiles ? 64 : 4;
  const int64_t per = rows / (4 * static_cast<int64_t>(threads)) / step * step;
  return std::clamp<int64_t>(per, tiles ? 64 : 16, 256);
}

}  // namespace

// The activation rows of `m` rows at x (ldx apart, k columns) packed for
// gemv_nvfp4_tiles into moe_tiles_x_ at *offset; returns the offset, or -1
// when a row cannot go that way (the row-major kernels then run).
int64_t CpuBackend::PackGroupedTiles(const float* x, int64_t m, int64_t ldx, int64_t k,
                                     int64_t* offset) {
  const int64_t size = isa_.nvfp4_tiles_packed_size(k);
  const int64_t at = *offset;
  if (static_cast<int64_t>(moe_tiles_x_.size()) < at + m * size) {
    moe_tiles_x_.resize(at + m * size);
  }
  for (int64_t i = 0; i < m; ++i) {
    if (!isa_.pack_nvfp4_tiles_activation(x + i * ldx, k, moe_tiles_x_.data() + at + i * size)) {
      return -1;
    }
  }
  *offset = at + m * size;
  return at;
}

void CpuBackend::MatmulGrouped(const GroupedProduct* products, int n_products) {
  // Products the pass does not take run as Matmul calls of their own.
  std::vector<int> grouped;
  grouped.reserve(n_products);
  for (int i = 0; i < n_products; ++i) {
    const GroupedProduct& p = products[i];
    if (p.m <= 0 || p.w->rows <= 0) continue;
    if (Groupable(isa_, *p.w, p.m)) {
      grouped.push_back(i);
    } else {
      Matmul(p.x, p.m, p.ldx, *p.w, p.y, p.ldy, false);
    }
  }
  if (grouped.empty()) return;
  // Tile packings, one per distinct activation block (gate and up of an
  // expert, or every expert at c1, share one).
  const size_t g = grouped.size();
  std::vector<int64_t> tiles_at(g, -1), first_task(g + 1, 0), rows_per_task(g);
  std::vector<int> alone;
  int64_t used = 0;
  for (size_t j = 0; j < g; ++j) {
    const GroupedProduct& p = products[grouped[j]];
    if (HasTiles(isa_, *p.w)) {
      for (size_t q = 0; q < j; ++q) {
        const GroupedProduct& o = products[grouped[q]];
        if (tiles_at[q] >= 0 && o.x == p.x && o.m == p.m && o.ldx == p.ldx &&
            o.w->cols == p.w->cols) {
          tiles_at[j] = tiles_at[q];
          break;
        }
      }
      if (tiles_at[j] < 0) tiles_at[j] = PackGroupedTiles(p.x, p.m, p.ldx, p.w->cols, &used);
      // Batch-invariant, a product with a row that cannot take the tiles is
      // done again below by Matmul, a row at a time.
      if (tiles_at[j] < 0 && batch_invariant_ && p.m > 1) alone.push_back(grouped[j]);
    }
    rows_per_task[j] = GroupedRowsPerTask(p.w->rows, pool_.size(), tiles_at[j] >= 0);
    first_task[j + 1] = first_task[j] + DivUp(p.w->rows, rows_per_task[j]);
  }
  const uint8_t* packed = moe_tiles_x_.data();
  pool_.ParallelFor(first_task[g], [&](int64_t task, int) {
    const size_t j =
        std::upper_bound(first_task.begin(), first_task.end(), task) - first_task.begin() - 1;
    const GroupedProduct& p = products[grouped[j]];
    const WeightMatrix& w = *p.w;
    const int64_t r0 = (task - first_task[j]) * rows_per_task[j];
    const int64_t r1 = std::min(w.rows, r0 + rows_per_task[j]);
    if (tiles_at[j] >= 0) {
      isa_.gemv_nvfp4_tiles(w, r0, r1, packed + tiles_at[j], p.m, p.y + r0, p.ldy, false);
      return;
    }
    isa_.gemv(w, r0, r1, p.x, p.m, p.ldx, p.y + r0, p.ldy, false);
  });
  for (int i : alone) {
    const GroupedProduct& p = products[i];
    Matmul(p.x, p.m, p.ldx, *p.w, p.y, p.ldy, false);
  }
}

void CpuBackend::MatmulScatterAdd(const ScatterProduct* products, int n_products, int64_t n,
                                  float* out, int64_t ldo, float* scratch) {
  if (n <= 0) return;
  // Runs of products the fused pass takes, in order; a product it does not
  // take (see Groupable) is its own Matmul and ScatterAddRows in its turn,
  // so the additions into a row keep the product order.
  const auto alone = [&](const ScatterProduct& p) {
    Matmul(p.x, p.m, p.ldx, *p.w, scratch, n, false);
    ScatterAddRows(scratch, n, p.rows, p.weights, p.m, n, out, ldo);
  };
  const auto flush = [&](std::vector<int>& run) {
    if (!ScatterAddRun(products, run, n, out, ldo)) {
      for (int i : run) alone(products[i]);
    }
    run.clear();
  };
  std::vector<int> run;
  for (int i = 0; i < n_products; ++i) {
    const ScatterProduct& p = products[i];
    if (p.m <= 0) continue;
    if (Groupable(isa_, *p.w, p.m)) {
      run.push_back(i);
      continue;
    }
    flush(run);
    alone(p);
  }
  flush(run);
}

bool CpuBackend::ScatterAddRun(const ScatterProduct* products, const std::vector<int>& run,
                               int64_t n, float* out, int64_t ldo) {
  if (run.empty()) return true;
  const size_t g = run.size();
  std::vector<int64_t> tiles_at(g, -1);
  int64_t used = 0, max_m = 0;
  bool any_tiles = false;
  for (size_t j = 0; j < g; ++j) {
    const ScatterProduct& p = products[run[j]];
    max_m = std::max(max_m, p.m);
    if (HasTiles(isa_, *p.w)) {
      tiles_at[j] = PackGroupedTiles(p.x, p.m, p.ldx, p.w->cols, &used);
      // Batch-invariant, a row that cannot take the tiles must not send the
      // product's other rows to the row-major kernels: the caller runs the
      // products one by one (Matmul takes such a batch a row at a time).
      if (tiles_at[j] < 0 && batch_invariant_ && p.m > 1) return false;
    }
    any_tiles = any_tiles || tiles_at[j] >= 0;
  }
  // Tasks own output features [r0, r1) of every product (whole tile groups
  // when any product reads tiles): the additions into a row of `out` never
  // race, and each task keeps the product order.
  const int64_t rows_per_task = GroupedRowsPerTask(n, pool_.size(), any_tiles);
  if (moe_task_y_.size() != static_cast<size_t>(pool_.size())) moe_task_y_.resize(pool_.size());
  const uint8_t* packed = moe_tiles_x_.data();
  pool_.ParallelFor(DivUp(n, rows_per_task), [&](int64_t task, int thread) {
    const int64_t r0 = task * rows_per_task;
    const int64_t r1 = std::min(n, r0 + rows_per_task);
    const int64_t width = r1 - r0;
    std::vector<float>& y = moe_task_y_[thread];
    if (static_cast<int64_t>(y.size()) < max_m * width) y.resize(max_m * width);
    for (size_t j = 0; j < g; ++j) {
      const ScatterProduct& p = products[run[j]];
      if (tiles_at[j] >= 0) {
        isa_.gemv_nvfp4_tiles(*p.w, r0, r1, packed + tiles_at[j], p.m, y.data(), width, false);
      } else {
        isa_.gemv(*p.w, r0, r1, p.x, p.m, p.ldx, y.data(), width, false);
      }
      for (int64_t i = 0; i < p.m; ++i) {
        const float wt = p.weights ? p.weights[i] : 1.0f;
        const float* src = y.data() + i * width;
        float* dst = out + p.rows[i] * ldo + r0;
        for (int64_t c = 0; c < width; ++c) dst[c] += wt * src[c];
      }
    }
  });
  return true;
}

}  // namespace octet::kernels::cpu
