#!/usr/bin/env bash
# Runs the kernels of kernels/ on the CPU harness under AddressSanitizer and UndefinedBehaviorSanitizer: the kernel
# tests; the compute suite, whose cuda_kernels_on_cpu instances drive the whole BF16 backend (every op, the
# model's forward and backward, the GEMM plans replayed by BLAS) through them; and the engine's suites over that
# backend, on one rank and over MPI on 2 and 3 (ZeRO 1-3 slices at unaligned offsets). A read or write past the end
# of a buffer, which a GPU would do silently or report only under compute-sanitizer, fails here. A block's threads are
# real threads (DPTRAIN_CUDA_ON_CPU_THREADS), whose stacks AddressSanitizer follows (the fibers' swapcontext it
# does not). Not part of the default build or CI: a build of its own, about 13 minutes on 2 cores, then 6.
#   scripts/sanitize-kernels.sh
# Builds into $DPTRAIN_SANITIZE_BUILD (default build-sanitize/); exits 1 when a test fails or a sanitizer reports.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/env.sh"
(($# == 0)) || dptrain_refuse "takes no arguments (got: $*; the build folder is DPTRAIN_SANITIZE_BUILD)"
out="${DPTRAIN_SANITIZE_BUILD:-$root/build-sanitize}"
kernel_tests=(kernels_test encoder_test layernorm_test reductions_test optimizer_test elementwise_test
  vectorized_test attention_test classifier_test)
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"

# The harness needs no CUDA: the sanitized build leaves it out, so it builds alike with or without nvcc. (Its
# configure warns that ThreadSanitizer does not run: it cannot be combined with these sanitizers.)
mkdir -p "$out"
if ! { cmake -S "$root" -B "$out" -DDPTRAIN_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="$flags -DDPTRAIN_CUDA_ON_CPU_THREADS" -DCMAKE_EXE_LINKER_FLAGS="$flags" &&
  cmake --build "$out" -j "$(nproc)" --target "${kernel_tests[@]}" compute_test dp_test dp_engine_mpi_test; } \
  >"$out/build.log" 2>&1; then
  tail -20 "$out/build.log" >&2
  echo "sanitize-kernels: the build failed (whole log: $out/build.log)" >&2
  exit 1
fi

# The cpu backend the kernels are compared with on one thread, as in the threads tests; leaks are not the point.
export OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
failed=0
run() {  # run NAME COMMAND...: a line with the outcome and the sanitizers' reports, the output in $out/NAME.log
  local name=$1 status start=$SECONDS reports
  shift
  if timeout 900 "$@" >"$out/$name.log" 2>&1; then status=passed; else status=FAILED; failed=1; fi
  reports=$(grep -c -E 'ERROR: AddressSanitizer|runtime error:' "$out/$name.log" || true)
  [[ $reports == 0 ]] || failed=1
  printf '%-24s %s, %s sanitizer reports, %d s (%s)\n' "$name" "$status" "$reports" $((SECONDS - start)) \
    "$out/$name.log"
}
for test in "${kernel_tests[@]/#/tests/kernels/}" tests/compute/compute_test tests/dp/dp_test; do
  run "$(basename "$test")" "$out/$test"
done
for ranks in 2 3; do
  run "dp_engine_mpi_test_np$ranks" mpirun -n "$ranks" --oversubscribe "$out/tests/dp/dp_engine_mpi_test"
done
exit "$failed"
