// decode_nvfp4_bf16 (kernels/src/cpu/isa.h: an NVFP4 matrix's rows as BF16
// products of code and block scale, which the prefill GEMM of NVFP4 weights
// multiplies) in every CPU kernel table this machine runs, against the
// definition written out here: kE2m1Values[code] * E4m3Table()[scale] in
// float, its top 16 bits. Every code meets every scale byte (the NaN scales
// 0x7f and 0xff included), on padded row strides, from a row offset, and
// with a partial last block.
#include <QtTest>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cpu/isa.h"
#include "octet/kernels/backend.h"
#include "octet/kernels/weight.h"

using namespace octet::kernels;

namespace {

// The kernel table of a backend that ProbeBackends says runs here.
const cpu::IsaKernels* Table(const std::string& name) {
#if defined(__x86_64__)
  if (name == "avx2") return &cpu::Avx2Kernels();
  if (name == "avx512") return &cpu::Avx512Kernels();
  if (name == "avx512-amx") return &cpu::AmxKernels();
#elif defined(__aarch64__)
  if (name == "neon") return &cpu::NeonKernels();
  if (name == "neon-dotprod") return &cpu::NeonDotprodKernels();
  if (name == "neon-bf16") return &cpu::NeonBf16Kernels();
#endif
  return nullptr;
}

// The tables of this CPU that have the op.
std::vector<std::pair<std::string, const cpu::IsaKernels*>> Tables() {
  std::vector<std::pair<std::string, const cpu::IsaKernels*>> out;
  for (const BackendInfo& b : ProbeBackends()) {
    const cpu::IsaKernels* t = b.available ? Table(b.name) : nullptr;
    if (t && t->decode_nvfp4_bf16) out.emplace_back(b.name, t);
  }
  return out;
}

uint16_t Want(uint8_t code, uint8_t scale) {
  const float v = kE2m1Values[code & 0xf] * E4m3Table()[scale];
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace

class TestKernelNvfp4Bf16 : public QObject {
  Q_OBJECT
 private slots:
  void everyCodeAndScaleOnEveryTable() {
    const auto tables = Tables();
    QVERIFY(!tables.empty());
    std::mt19937 rng(31);
    for (const auto& [name, t] : tables) {
      for (const int64_t cols : {int64_t{640}, int64_t{200}, int64_t{16}}) {
        const int64_t rows = 70, row0 = 3, nrows = 64;
        const int64_t blocks = (cols + 15) / 16;
        const int64_t stride = (cols + 1) / 2 + 5, scale_stride = blocks + 3;
        std::vector<uint8_t> codes(rows * stride), scales(rows * scale_stride);
        for (uint8_t& c : codes) c = static_cast<uint8_t>(rng());
        // Scale bytes in order, so that 64 rows of 40 blocks take each one ten times.
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t k = 0; k < scale_stride; ++k) {
            scales[r * scale_stride + k] = static_cast<uint8_t>(r * blocks + k);
          }
        }
        WeightMatrix w = WeightMatrix::Nvfp4(codes.data(), scales.data(), 1.0f, rows, cols);
        w.row_stride = stride;
        w.scale_row_stride = scale_stride;
        std::vector<uint16_t> out(nrows * cols, 0xdead);
        t->decode_nvfp4_bf16(w, row0, nrows, out.data());
        for (int64_t r = 0; r < nrows; ++r) {
          for (int64_t c = 0; c < cols; ++c) {
            const uint8_t byte = codes[(row0 + r) * stride + c / 2];
            const uint8_t code = c % 2 ? byte >> 4 : byte & 0xf;
            const uint8_t scale = scales[(row0 + r) * scale_stride + c / 16];
            const uint16_t want = Want(code, scale);
            if (out[r * cols + c] != want) {
              QFAIL(qPrintable(QString("%1, %2 columns, row %3 column %4 (code %5, scale 0x%6): "
                                       "0x%7, want 0x%8")
                                   .arg(QString::fromStdString(name))
                                   .arg(cols)
                                   .arg(row0 + r)
                                   .arg(c)
                                   .arg(code)
                                   .arg(scale, 0, 16)
                                   .arg(out[r * cols + c], 0, 16)
                                   .arg(want, 0, 16)));
            }
          }
        }
      }
    }
    qInfo("%zu kernel tables checked", tables.size());
  }
};

// Not QTEST_APPLESS_MAIN: where no table of this CPU has the op (plain NEON,
// the scalar backend alone) the whole premise is absent, which the program
// says in one line and exits 77 (ctest: skipped) before any test runs.
int main(int argc, char** argv) {
  if (Tables().empty()) {
    std::printf("no kernel table of this CPU has decode_nvfp4_bf16\n");
    return 77;
  }
  TestKernelNvfp4Bf16 t;
  return QTest::qExec(&t, argc, argv);
}
#include "test_kernel_nvfp4_bf16.moc"
