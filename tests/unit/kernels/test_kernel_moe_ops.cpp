// The mixture-of-experts ops (backend.h: MatmulGrouped, MatmulScatterAdd) on
// every CPU backend this machine runs:
//   * against a double-precision reference computed here from the weights
//     (WeightAt) and against the scalar backend's result, within the
//     tolerance of the matmul conformance test;
//   * exactly (bit for bit) equal, on each backend, to what the calls they
//     replace give on that backend: a Matmul per product, and for the scatter
//     a Matmul and a ScatterAddRows per product in order. The engine relies
//     on that: its grouped MoE path and its per-expert path give the same
//     logits.
// Shapes cover what a decode step sends: one row shared by every product
// (c1), a few distinct rows per product (batched decode, speculative
// verification), NVFP4 with and without tiles, BF16/F16/F32, a product too
// large to group (prefill) among grouped ones, a token hit by several
// products, and null weights.
#include <QtTest>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "conformance_reference.h"
#include "kernel_test_util.h"
#include "octet/kernels/backend.h"
#include "octet/kernels/weight.h"

using namespace octet::kernels;
using namespace octet::kernels::testing;

namespace {

// Random weights (conformance_reference.h); NVFP4 ones get their tile copy
// when `tiles` and the shape allows.
std::unique_ptr<OwnedWeight> RandomWeight(WeightFormat f, int64_t rows, int64_t cols, bool tiles,
                                          std::mt19937& rng) {
  auto o = std::make_unique<OwnedWeight>(testing::RandomWeight(f, rows, cols, rng));
  if (tiles) AddTiles(o.get());
  return o;
}

// The comparisons against double precision: |got - want| <= 1e-5 + 1e-5 *
// scale (scale: the sum of |terms|), plus the NVFP4 tile readers' activation
// rounding where they read tiles (Nvfp4TileRoundingBound).
constexpr double kTol = 1e-5;

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// One expert of a test case: its weights and rows.
struct Expert {
  std::unique_ptr<OwnedWeight> gate, down;
  int64_t m = 0;
};

}  // namespace

class TestKernelMoeOps : public QObject {
  Q_OBJECT
 private slots:
  void supportedOnEveryCpuBackend() {
    for (auto& b : AllBackends(1)) {
      QVERIFY(b->supports(Op::kMatmulGrouped));
      QVERIFY(b->supports(Op::kMatmulScatterAdd));
    }
    QVERIFY(OpName(Op::kMatmulGrouped) == "matmul_grouped");
    QVERIFY(OpName(Op::kMatmulScatterAdd) == "matmul_scatter_add");
  }

  // MatmulGrouped: products with their own rows, and products sharing one
  // block of rows (c1: the one token's row for every expert's gate and up).
  void groupedEqualsMatmulPerProduct_data() {
    QTest::addColumn<int>("format");
    QTest::addColumn<bool>("tiles");
    QTest::addColumn<bool>("shared");
    QTest::newRow("nvfp4 tiles shared") << int(WeightFormat::kNvfp4) << true << true;
    QTest::newRow("nvfp4 tiles distinct") << int(WeightFormat::kNvfp4) << true << false;
    QTest::newRow("nvfp4 row-major distinct") << int(WeightFormat::kNvfp4) << false << false;
    QTest::newRow("bf16 shared") << int(WeightFormat::kBF16) << false << true;
    QTest::newRow("bf16 distinct") << int(WeightFormat::kBF16) << false << false;
    QTest::newRow("f16 distinct") << int(WeightFormat::kF16) << false << false;
    QTest::newRow("f32 distinct") << int(WeightFormat::kF32) << false << false;
  }
  void groupedEqualsMatmulPerProduct() {
    QFETCH(int, format);
    QFETCH(bool, tiles);
    QFETCH(bool, shared);
    const WeightFormat f = static_cast<WeightFormat>(format);
    std::mt19937 rng(101 + format * 7 + tiles * 3 + shared);
    constexpr int64_t k = 192, ldx = 200;
    // Row counts per product: the decode sizes, one past the largest
    // grouped batch (9: its own Matmul), and prefill-sized (20).
    const std::vector<int64_t> ms = shared ? std::vector<int64_t>{1, 1, 1, 1, 1, 1}
                                           : std::vector<int64_t>{1, 2, 3, 4, 5, 8, 9, 20};
    const std::vector<int64_t> widths = {96, 64, 48, 112, 80, 96, 32, 64};
    std::vector<std::unique_ptr<OwnedWeight>> ws;
    std::vector<std::vector<float>> xs;
    for (size_t i = 0; i < ms.size(); ++i) {
      ws.push_back(RandomWeight(f, widths[i], k, tiles, rng));
      if (!shared || i == 0) xs.push_back(RandomFloats(ms[i] * ldx, rng));
    }
    auto x_of = [&](size_t i) { return xs[shared ? 0 : i].data(); };
    // The reference in double.
    std::vector<std::vector<double>> want(ms.size()), scale(ms.size()), rounding(ms.size());
    for (size_t i = 0; i < ms.size(); ++i) {
      const WeightMatrix& w = ws[i]->view;
      for (int64_t r = 0; r < ms[i]; ++r) {
        for (int64_t c = 0; c < w.rows; ++c) {
          double d = 0, a = 0;
          for (int64_t j = 0; j < k; ++j) {
            const double p = double(WeightAt(w, c, j)) * x_of(i)[r * ldx + j];
            d += p;
            a += std::fabs(p);
          }
          want[i].push_back(d);
          scale[i].push_back(a);
          rounding[i].push_back(tiles ? Nvfp4TileRoundingBound(w, c, x_of(i) + r * ldx) : 0.0);
        }
      }
    }
    // The scalar backend's result first: every backend within the tolerance of it.
    auto run = [&](KernelBackend& backend) {
      std::vector<std::vector<float>> y(ms.size());
      std::vector<KernelBackend::GroupedProduct> ps;
      for (size_t i = 0; i < ms.size(); ++i) {
        y[i].assign(ms[i] * widths[i], 7.0f);  // written, not added to
        ps.push_back({x_of(i), ms[i], ldx, &ws[i]->view, y[i].data(), widths[i]});
      }
      backend.MatmulGrouped(ps.data(), static_cast<int>(ps.size()));
      return y;
    };
    auto scalar = CreateBackend("scalar", {1});
    QVERIFY(scalar.ok());
    const std::vector<std::vector<float>> ys = run(**scalar);
    for (auto& backend : AllBackends(2)) {
      const std::vector<std::vector<float>> y = run(*backend);
      for (size_t i = 0; i < ms.size(); ++i) {
        const std::string where = std::string(backend->name()) + " product " + std::to_string(i) +
                                  " (" + std::to_string(ms[i]) + " rows)";
        std::string why;
        const std::vector<double> allowance =
            backend->UsesNvfp4Tiles() ? rounding[i] : std::vector<double>{};
        QVERIFY2(Close(y[i], want[i], scale[i], kTol, &why, allowance, kTol),
                 (where + ": " + why).c_str());
        std::vector<double> s_want(ys[i].begin(), ys[i].end());
        QVERIFY2(Close(y[i], s_want, scale[i], kTol, &why, allowance, kTol),
                 (where + " against scalar: " + why).c_str());
        std::vector<float> alone(ms[i] * widths[i], -3.0f);
        backend->Matmul(x_of(i), ms[i], ldx, ws[i]->view, alone.data(), widths[i], false);
        QVERIFY2(SameBits(y[i], alone), (where + ": differs from its own Matmul").c_str());
      }
    }
  }

  // MatmulScatterAdd: the down projections of a step's experts, each row
  // weighted and added into its token's row; tokens hit by several experts
  // (additions in product order), null weights, and a product too large to
  // group between grouped ones.
  void scatterAddEqualsMatmulThenScatter_data() {
    QTest::addColumn<int>("format");
    QTest::addColumn<bool>("tiles");
    QTest::addColumn<bool>("decode");  // every product one row (c1)
    QTest::newRow("nvfp4 tiles c1") << int(WeightFormat::kNvfp4) << true << true;
    QTest::newRow("nvfp4 tiles batch") << int(WeightFormat::kNvfp4) << true << false;
    QTest::newRow("nvfp4 row-major batch") << int(WeightFormat::kNvfp4) << false << false;
    QTest::newRow("bf16 c1") << int(WeightFormat::kBF16) << false << true;
    QTest::newRow("bf16 batch") << int(WeightFormat::kBF16) << false << false;
    QTest::newRow("f32 batch") << int(WeightFormat::kF32) << false << false;
  }
  void scatterAddEqualsMatmulThenScatter() {
    QFETCH(int, format);
    QFETCH(bool, tiles);
    QFETCH(bool, decode);
    const WeightFormat f = static_cast<WeightFormat>(format);
    std::mt19937 rng(202 + format * 5 + tiles * 3 + decode);
    constexpr int64_t n = 208, k = 128, ldx = 136, ldo = 216, tokens = 12;
    const std::vector<int64_t> ms = decode ? std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 1}
                                           : std::vector<int64_t>{2, 1, 3, 10, 4, 1, 8};
    std::vector<std::unique_ptr<OwnedWeight>> ws;
    std::vector<std::vector<float>> xs, wts;
    std::vector<std::vector<int64_t>> rows;
    std::uniform_int_distribution<int64_t> tok(0, decode ? 0 : tokens - 1);
    for (size_t i = 0; i < ms.size(); ++i) {
      ws.push_back(RandomWeight(f, n, k, tiles, rng));
      xs.push_back(RandomFloats(ms[i] * ldx, rng));
      wts.push_back(RandomFloats(ms[i], rng, 0.5f));
      std::vector<int64_t> r(ms[i]);
      for (auto& t : r) t = tok(rng);
      if (ms[i] >= 2) r[1] = r[0];  // one token twice in a product
      rows.push_back(r);
    }
    const std::vector<float> out0 = RandomFloats(tokens * ldo, rng);
    // Reference: out0 plus every weighted product row, in double.
    std::vector<double> want(out0.begin(), out0.end()), scale(out0.size(), 0.0);
    std::vector<double> rounding(out0.size(), 0.0);
    for (auto& s : scale) s = 1.0;
    for (size_t i = 0; i < ms.size(); ++i) {
      const bool unweighted = i == 2;  // null weights: 1
      for (int64_t j = 0; j < ms[i]; ++j) {
        const double wt = unweighted ? 1.0 : wts[i][j];
        for (int64_t c = 0; c < n; ++c) {
          double d = 0, a = 0;
          for (int64_t q = 0; q < k; ++q) {
            const double p = double(WeightAt(ws[i]->view, c, q)) * xs[i][j * ldx + q];
            d += p;
            a += std::fabs(p);
          }
          want[rows[i][j] * ldo + c] += wt * d;
          scale[rows[i][j] * ldo + c] += std::fabs(wt) * a;
          if (tiles) {
            rounding[rows[i][j] * ldo + c] +=
                std::fabs(wt) * Nvfp4TileRoundingBound(ws[i]->view, c, xs[i].data() + j * ldx);
          }
        }
      }
    }
    for (auto& backend : AllBackends(2)) {
      std::vector<KernelBackend::ScatterProduct> ps;
      for (size_t i = 0; i < ms.size(); ++i) {
        ps.push_back({xs[i].data(), ms[i], ldx, &ws[i]->view, rows[i].data(),
                      i == 2 ? nullptr : wts[i].data()});
      }
      std::vector<float> scratch(10 * n, 0.0f);
      std::vector<float> out = out0;
      backend->MatmulScatterAdd(ps.data(), static_cast<int>(ps.size()), n, out.data(), ldo,
                                scratch.data());
      const std::string name(backend->name());
      std::string why;
      QVERIFY2(Close(out, want, scale, kTol, &why,
                     backend->UsesNvfp4Tiles() ? rounding : std::vector<double>{}, kTol),
               (name + ": " + why).c_str());
      // The calls it replaces, on the same backend: the same bits.
      std::vector<float> expect = out0, y(10 * n);
      for (const auto& p : ps) {
        backend->Matmul(p.x, p.m, p.ldx, *p.w, y.data(), n, false);
        backend->ScatterAddRows(y.data(), n, p.rows, p.weights, p.m, n, expect.data(), ldo);
      }
      QVERIFY2(SameBits(out, expect), (name + ": differs from Matmul + ScatterAddRows").c_str());
      // The default (KernelBackend's composition) is the same thing again.
      std::vector<float> composed = out0;
      backend->KernelBackend::MatmulScatterAdd(ps.data(), static_cast<int>(ps.size()), n,
                                               composed.data(), ldo, scratch.data());
      QVERIFY2(SameBits(out, composed), (name + ": differs from the composed default").c_str());
    }
  }

  // Nothing to do: no products, or products without rows.
  void emptyCallsChangeNothing() {
    std::mt19937 rng(5);
    auto w = RandomWeight(WeightFormat::kNvfp4, 64, 64, true, rng);
    for (auto& backend : AllBackends(2)) {
      std::vector<float> out(64, 1.5f), y(64, 2.5f);
      backend->MatmulScatterAdd(nullptr, 0, 64, out.data(), 64, nullptr);
      const KernelBackend::ScatterProduct none{nullptr, 0, 64, &w->view, nullptr, nullptr};
      backend->MatmulScatterAdd(&none, 1, 64, out.data(), 64, nullptr);
      QCOMPARE(out, std::vector<float>(64, 1.5f));
      const KernelBackend::GroupedProduct g{nullptr, 0, 64, &w->view, y.data(), 64};
      backend->MatmulGrouped(&g, 1);
      QCOMPARE(y, std::vector<float>(64, 2.5f));
    }
  }
};

QTEST_APPLESS_MAIN(TestKernelMoeOps)
#include "test_kernel_moe_ops.moc"
