#!/usr/bin/env bash
# Runs the kernels of kernels/ on the CPU harness under AddressSanitizer and UndefinedBehaviorSanitizer: the kernel
# tests, and the compute suite, whose cuda_kernels_on_cpu instances drive the whole BF16 backend (every op, the
# model's forward and backward, the GEMM plans replayed by BLAS) through them. A read or write past the end of a
# tensor, which a GPU would do silently or report only under compute-sanitizer, fails here. A block's threads are
# real threads (DPTRAIN_CUDA_ON_CPU_THREADS), whose stacks AddressSanitizer follows (the fibers' swapcontext it
# does not). Not part of the default build or CI: a build of its own, about 10 minutes on 2 cores, then ~1 minute.
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
  cmake --build "$out" -j "$(nproc)" --target "${kernel_tests[@]}" compute_test; } >"$out/build.log" 2>&1; then
  tail -20 "$out/build.log" >&2
  echo "sanitize-kernels: the build failed (whole log: $out/build.log)" >&2
  exit 1
fi

# The cpu backend the kernels are compared with on one thread, as in the threads tests; leaks are not the point.
export OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
failed=0
for test in "${kernel_tests[@]/#/tests/kernels/}" tests/compute/compute_test; do
  log="$out/$(basename "$test").log"
  start=$SECONDS
  if "$out/$test" >"$log" 2>&1; then status=passed; else status=FAILED; failed=1; fi
  reports=$(grep -c -E 'ERROR: AddressSanitizer|runtime error:' "$log" || true)
  [[ $reports == 0 ]] || failed=1
  printf '%-24s %s, %s sanitizer reports, %d s (%s)\n' "$(basename "$test")" "$status" "$reports" \
    $((SECONDS - start)) "$log"
done
exit "$failed"
