#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time: run_fuzz.sh BINARY SEED_DIR WORK_DIR
# or runs it once on every file in the folders that exist: run_fuzz.sh --replay BINARY DIR...
#   ROCE_FUZZ_SECONDS  how long (default 60)
#   ROCE_FUZZ_JOBS     parallel fuzzing processes (default 1)
# The corpus grows in WORK_DIR/corpus (kept between runs; the seeds are read each time). A
# crash leaves its input in WORK_DIR/crash-*, ready to be copied to
# tests/fuzz/regressions/<target>/; the test then fails.
set -euo pipefail
if [[ $1 == --replay ]]; then
  bin=$2
  shift 2
  files=()
  for d in "$@"; do
    [[ -d $d ]] && while IFS= read -r f; do files+=("$f"); done < <(find "$d" -maxdepth 1 -type f | sort)
  done
  echo "run_fuzz: replaying ${#files[@]} inputs"
  ((${#files[@]} == 0)) && exit 0
  exec "$bin" "${files[@]}"
fi
bin=$1 seeds=$2 work=$3
secs=${ROCE_FUZZ_SECONDS:-60}
mkdir -p "$work/corpus"
args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=8192
      -print_final_stats=1 -artifact_prefix="$work/")
if [[ ${ROCE_FUZZ_JOBS:-1} -gt 1 ]]; then
  args+=(-fork="$ROCE_FUZZ_JOBS")
fi
echo "run_fuzz: $(basename "$bin") for ${secs}s"
exec "$bin" "${args[@]}" "$work/corpus" "$seeds"
