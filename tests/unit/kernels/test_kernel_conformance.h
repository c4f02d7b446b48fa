// The kernel conformance test's Qt Test class. Its functions are defined in
// test_kernel_conformance.cpp (the number formats, the thread pool, matmul and
// the NVFP4 tiles) and test_kernel_conformance_ops.cpp (GEMM and the other
// ops); Qt Test runs them in the order declared here.
#pragma once

#include <QObject>

class TestKernelConformance : public QObject {
  Q_OBJECT
 private slots:
  // test_kernel_conformance.cpp
  void conversions();
  void threadPoolRunsEveryTaskOnce();
  void threadPoolBackToBackJobsRunEachTaskOnce();
  void threadPoolTakesOverAStalledThreadsRange();
  void matmulEveryFormatAndShape();
  void batchedBf16DecodeTilesAndTails();
  void prefillGemmPanelsAndSlices();
  void bf16MatmulModeRoundsOnlyPrefillActivations();
  void batchedBf16DecodeKeepsFloatActivations();
  void matmulOnSlicesEqualsSliceOfMatmul();
  void matmulNvfp4NonFiniteActivations();
  void nvfp4TilesDecode();
  void nvfp4TilesRowsDoNotDependOnTheBatch();
  void avx2DenseRowsDoNotDependOnTheBatch();
  void batchInvariantBackendsKeepEachRowsBits();
  void nvfp4TilesAreRead();
  void nvfp4TilesLimits();
  void nvfp4TilesInMatmulMulti();
  void matmulMultiEqualsSeparateCalls();
  // test_kernel_conformance_ops.cpp
  void gemmAllTransposes();
  void elementwiseOpsMatchScalar();
  void ropeMatchesFormula();
  void ropeHeadsEqualsRopeOnEachHead();
  void ropeAnglesKeptByPosition();
  void attentionMatchesNaive();
  void batchInvariantAttentionKeepsEachRowsBits();
  void embeddingArgmaxTopK();
  void buffersAndCopies();
  void forwardPassSmallOps();
  void argmaxIsTheFirstLargestOnLongRows();
  void unknownBackendIsAnError();
};
