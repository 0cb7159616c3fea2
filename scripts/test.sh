#!/usr/bin/env bash
# The README's test command: installs the dependencies (Debian 12, root), configures, builds and
# runs the default test set (everything but the soak, interop and perf labels), the interop smoke
# subset (label smoke: one cell per tool family against Linux rxe in a VM; skipped where VMs
# cannot run), then the unit, protocol and loopback tests again under ASan + UBSan (without the
# 1 GiB message; with the fuzz regressions), then every libFuzzer target for a short while
# (the fuzz preset: clang, ASan + UBSan; ROCE_FUZZ_SECONDS each, 10 by default).
#   ROCE_SKIP_SANITIZE=1  skip the sanitizer pass
#   ROCE_SKIP_INTEROP=1   skip the interop smoke subset
#   ROCE_SKIP_FUZZ=1      skip the fuzz pass
#   ROCE_CTEST_ARGS=...   extra ctest arguments (e.g. "-L unit")
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh

cmake --preset default >/dev/null
cmake --build --preset default
# shellcheck disable=SC2086
ctest --preset default ${ROCE_CTEST_ARGS:-}

if [[ -z "${ROCE_SKIP_INTEROP:-}" ]]; then
  ctest --test-dir build -L smoke --output-on-failure
fi

if [[ -z "${ROCE_SKIP_SANITIZE:-}" ]]; then
  cmake --preset sanitize >/dev/null
  cmake --build --preset sanitize
  # shellcheck disable=SC2086
  ctest --preset sanitize -L 'unit|protocol|loopback' -LE 'large|soak|interop|perf' ${ROCE_CTEST_ARGS:-}
fi
if [[ -z "${ROCE_SKIP_FUZZ:-}" ]]; then
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz
  ROCE_FUZZ_SECONDS=${ROCE_FUZZ_SECONDS:-10} ctest --preset fuzz
fi
echo "test.sh: all tests passed"
