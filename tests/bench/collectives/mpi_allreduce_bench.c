/* OpenMPI MPI_Allreduce baseline for `octet collbench`: the same sizes, the
 * same integer-valued f32 inputs, the same statistics (p50/p99 over the
 * iterations of the slowest rank's time, no barrier between iterations), so
 * the two can be compared as ratios within one run.
 *
 *   mpirun --allow-run-as-root --oversubscribe -np 4 \
 *       octet_bench_mpi_allreduce --min-bytes 8 --max-bytes 64M --iters 20 --json
 *
 * Add `--mca btl self,tcp` to mpirun to make OpenMPI use TCP loopback (the
 * comparison for `--transport tcp`); by default it uses shared memory. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long long parse_size(const char* s) {
  char* end = NULL;
  double v = strtod(s, &end);
  if (end == s || v < 0) return -1;
  switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    case '\0': break;
    default: return -1;
  }
  return (long long)v;
}

static int cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v. */
static double percentile(const double* v, int n, double q) {
  int k = (int)ceil(q * n);
  if (k < 1) k = 1;
  if (k > n) k = n;
  return v[k - 1];
}

static int input_value(int rank, long long i) { return (int)((rank + 1) * (i % 5 + 1) % 7) - 3; }

int main(int argc, char** argv) {
  long long min_bytes = 8, max_bytes = 64LL << 20;
  double factor = 2;
  int iters = 50, warmup = 10, json = 0;
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (!strcmp(a, "--min-bytes")) min_bytes = parse_size(v), ++i;
    else if (!strcmp(a, "--max-bytes")) max_bytes = parse_size(v), ++i;
    else if (!strcmp(a, "--factor")) factor = atof(v), ++i;
    else if (!strcmp(a, "--iters")) iters = atoi(v), ++i;
    else if (!strcmp(a, "--warmup")) warmup = atoi(v), ++i;
    else if (!strcmp(a, "--json")) json = 1;
    else {
      if (rank == 0) fprintf(stderr, "octet_bench_mpi_allreduce: unknown flag %s\n", a);
      MPI_Finalize();
      return 2;
    }
  }
  if (min_bytes < 4 || max_bytes < min_bytes || factor <= 1 || iters < 1 || warmup < 0) {
    if (rank == 0) fprintf(stderr, "octet_bench_mpi_allreduce: bad sizes or counts\n");
    MPI_Finalize();
    return 2;
  }
  double* mine = malloc(sizeof(double) * iters);
  double* slowest = malloc(sizeof(double) * iters);
  if (rank == 0) {
    if (json) printf("{\"op\":\"all_reduce\",\"dtype\":\"f32\",\"ranks\":%d,\"transport\":\"openmpi\",\"rows\":[", n);
    else printf("# MPI_Allreduce f32 sum, %d ranks; p50/p99 of the slowest rank over %d iterations\n"
                "#      bytes        count    p50(us)    p99(us) algbw(GB/s) busbw(GB/s)  #wrong\n",
                n, iters);
  }
  long long last_count = 0, wrong_total = 0;
  int first = 1;
  for (double b = (double)min_bytes; b <= max_bytes * 1.0001; b *= factor) {
    long long count = (long long)b / 4;
    if (count < 1) count = 1;
    if (count == last_count) continue;
    last_count = count;
    float* in = malloc(sizeof(float) * count);
    float* out = malloc(sizeof(float) * count);
    for (long long i = 0; i < count; ++i) in[i] = (float)input_value(rank, i);
    for (int i = 0; i < warmup; ++i) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    long long wrong = 0;
    for (int i = 0; i < iters; ++i) {
      const double t0 = MPI_Wtime();
      MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      mine[i] = (MPI_Wtime() - t0) * 1e6;
      if (i == iters - 1) {
        for (long long k = 0; k < count; ++k) {
          int want = 0;
          for (int q = 0; q < n; ++q) want += input_value(q, k);
          wrong += out[k] != (float)want;
        }
      }
    }
    MPI_Allreduce(mine, slowest, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    long long wrong_sum = 0;
    MPI_Allreduce(&wrong, &wrong_sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    wrong_total += wrong_sum;
    if (rank == 0) {
      qsort(slowest, iters, sizeof(double), cmp_double);
      const double p50 = percentile(slowest, iters, 0.5), p99 = percentile(slowest, iters, 0.99);
      const double bytes = (double)count * 4;
      const double algbw = bytes / (p50 * 1e-6) / 1e9, busbw = algbw * 2.0 * (n - 1) / n;
      if (json) {
        printf("%s{\"bytes\":%.0f,\"count\":%lld,\"time_us_p50\":%.3f,\"time_us_p99\":%.3f,"
               "\"algbw_gbps\":%.6f,\"busbw_gbps\":%.6f,\"wrong\":%lld}",
               first ? "" : ",", bytes, count, p50, p99, algbw, busbw, wrong_sum);
      } else {
        printf("%12.0f %12lld %10.2f %10.2f %10.3f %10.3f %8lld\n", bytes, count, p50, p99, algbw,
               busbw, wrong_sum);
      }
      fflush(stdout);
    }
    first = 0;
    free(in);
    free(out);
  }
  if (rank == 0 && json) printf("],\"iters\":%d,\"warmup\":%d,\"wrong\":%lld}\n", iters, warmup, wrong_total);
  free(mine);
  free(slowest);
  MPI_Finalize();
  return wrong_total ? 1 : 0;
}
