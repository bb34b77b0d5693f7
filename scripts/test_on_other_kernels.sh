#!/usr/bin/env bash
# Run the fast lane of the tests (`make test-fast`: the unit tests and every page block) once per
# configuration of the numerical kernels, and print one line per configuration. The numerical
# tests must hold on any CPU: OpenBLAS and NumPy pick different kernels (summation order,
# blocking, FMA or not) on AVX2 and AVX-512 machines and with 1 or 2 threads, and the tolerances
# follow from the arithmetic (tests/helpers.py, "tolerances"), not from one machine's rounding.
#
# The variables below are set for these runs only, never in CI or in the tests:
#   OPENBLAS_CORETYPE         which OpenBLAS kernels run (unset: the CPU's own)
#   NPY_DISABLE_CPU_FEATURES  NumPy's SIMD dispatch without some CPU features (NumPy 2.4 names
#                             the levels X86_V3 = AVX2/FMA, X86_V4 = AVX-512, AVX512_ICL,
#                             AVX512_SPR = AVX-512 with FP16, the newest Intel Xeons)
#   TRANSFORMER_NP_NUM_THREADS, OPENBLAS_NUM_THREADS   threads of the package and of BLAS
# A configuration can only select what the CPU has and what NumPy's OpenBLAS was built with: a
# kernel that is not there runs the CPU's best instead. Each line prints the OpenBLAS kernel
# and NumPy's SIMD levels actually in use, and a configuration whose kernels and threads are
# those of a configuration already run is not run again: its line says so, and which one it
# repeats (e.g. SapphireRapids on an AVX2 CPU, or on an OpenBLAS without that kernel). The kernel
# configurations run on two pytest-xdist workers (each with one BLAS thread: tests/conftest.py);
# the thread configurations run in one process, so that the BLAS threads are the ones the
# variables ask for.
#
# Usage: scripts/test_on_other_kernels.sh [pytest arguments, e.g. tests/test_attention.py]
#        MARKS=${MARKS:-"not site and not notebooks and not browser and not slow"} scripts/... for the slow tests too
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
MARKS=${MARKS:-"not site and not notebooks and not browser and not slow"}

configs=(
  "machine's environment|"
  "OpenBLAS: the CPU's own kernels|-u OPENBLAS_CORETYPE"
  "OpenBLAS: SapphireRapids (AVX-512 FP16)|OPENBLAS_CORETYPE=SapphireRapids"
  "OpenBLAS: Cooperlake (AVX-512 BF16)|OPENBLAS_CORETYPE=Cooperlake"
  "OpenBLAS: SkylakeX (AVX-512)|OPENBLAS_CORETYPE=SkylakeX"
  "OpenBLAS: Haswell (AVX2, FMA)|OPENBLAS_CORETYPE=Haswell"
  "OpenBLAS: Sandybridge (AVX, no FMA)|OPENBLAS_CORETYPE=Sandybridge"
  "OpenBLAS: Prescott (SSE3)|OPENBLAS_CORETYPE=Prescott"
  "NumPy without AVX512_SPR|-u OPENBLAS_CORETYPE NPY_DISABLE_CPU_FEATURES='AVX512_SPR'"
  "NumPy without AVX-512|-u OPENBLAS_CORETYPE NPY_DISABLE_CPU_FEATURES='X86_V4 AVX512_ICL AVX512_SPR'"
  "NumPy without AVX2 and AVX-512|NPY_DISABLE_CPU_FEATURES='X86_V3 X86_V4 AVX512_ICL AVX512_SPR'"
  "1 thread|TRANSFORMER_NP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1|-n 0"
  "1 thread, the CPU's own kernels|-u OPENBLAS_CORETYPE TRANSFORMER_NP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1|-n 0"
  "2 threads|TRANSFORMER_NP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2|-n 0"
  "2 threads, the CPU's own kernels|-u OPENBLAS_CORETYPE TRANSFORMER_NP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2|-n 0"
)

status=0
declare -A seen  # kernels and threads of a configuration run -> its name
mkdir -p test-artifacts
printf '%-40s | %-25s | %-37s | %s\n' configuration "OpenBLAS (threads)" "NumPy SIMD in use" result
for entry in "${configs[@]}"; do
  IFS='|' read -r name settings workers <<<"$entry"
  eval "vars=($settings)"  # the arguments of env, quotes kept
  kernels=$(env "${vars[@]}" "$PY" -W ignore -c '
import numpy
import threadpoolctl
from numpy._core._multiarray_umath import __cpu_features__ as found
blas = threadpoolctl.threadpool_info()[0]
levels = [k for k in ("X86_V3", "X86_V4", "AVX512_ICL", "AVX512_SPR") if found.get(k)]
levels = levels or ["baseline"]
print(blas["architecture"], "x" + str(blas["num_threads"]), "|", " ".join(levels))')
  [ -n "$workers" ] || kernels="${kernels%% x*} x1 per worker |${kernels#*|}"
  if [ -n "${seen[$kernels]:-}" ]; then
    why="the same kernels and threads as \"${seen[$kernels]}\""
    asked=$(sed -n 's/.*OPENBLAS_CORETYPE=\([A-Za-z]*\).*/\1/p' <<<"$settings")
    arch=${kernels%% x*}
    if [ -n "$asked" ] && [ "${asked,,}" != "${arch,,}" ]; then
      why="this OpenBLAS does not select $asked here (it runs $arch): $why"
    fi
    printf '%-40s | %-25s | %-37s | not run: %s\n' "$name" "${kernels%% |*}" "${kernels##*| }" "$why"
    continue
  fi
  seen[$kernels]=$name
  log="test-artifacts/kernels-$(echo "$name" | tr -c 'A-Za-z0-9' '_').log"
  # shellcheck disable=SC2086 # $workers is two words or none
  env "${vars[@]}" "$PY" -m pytest -q -p no:cacheprovider ${workers:--n 2 --dist loadgroup} \
    -m "$MARKS" "$@" >"$log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || status=1
  summary=$(grep -E '^[=]* ?[0-9]+ (passed|failed)' "$log" | tail -1 | tr -d '=')
  printf '%-40s | %-25s | %-37s | %s (rc %d)\n' "$name" "${kernels%% |*}" "${kernels##*| }" \
    "${summary:-no summary, see $log}" "$rc"
done
exit $status
