#!/usr/bin/env bash
# Sets up, builds and runs Gantry's main job on the bundled example: a small cluster
# and trace (examples/) replayed through the scheduler, with the report summary printed.
#
#   scripts/demo.sh [SIM ARGS...]
#   scripts/demo.sh --tiny [--build DIR] [--out DIR] [SIM ARGS...]
#
# --tiny: the CI check that the demo still works end to end (ctest -L bench), in under a
# second: no set-up and no build (the build DIR, default build/release, as it is), files
# in OUT (default DIR/bench-tiny/demo); exits 1 unless the summary was printed, the report
# counts the example's jobs with some finished, the event log passes gantry-check against
# examples/ (0 violations) and the HTML report is a page.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == --tiny ]]; then
  shift
  build=build/release out=
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --build) build=$2; shift 2 ;;
      --out) out=$2; shift 2 ;;
      *) break ;;
    esac
  done
  out=${out:-$build/bench-tiny/demo}
  mkdir -p "$out"
  rm -f "$out"/example-*
  "$build/src/gantry" sim --events "$out/example-events.jsonl" --report "$out/example-report.json" \
    --html "$out/example-report.html" "$@" | tee "$out/summary.txt"
  fail() { echo "demo.sh --tiny: $*" >&2; exit 1; }
  for want in "^policy [a-z]+: [0-9]+ jobs submitted" "GPU utilization" "scheduling latency" "HTML report"; do
    grep -qE "$want" "$out/summary.txt" || fail "the summary has no \"$want\" line"
  done
  python3 - "$out/example-report.json" "$(grep -c . examples/trace.jsonl)" <<'PY' || exit 1
import json, sys
jobs = json.load(open(sys.argv[1]))["jobs"]
if jobs["submitted"] != int(sys.argv[2]) or jobs["finished"] <= 0:
    sys.exit(f"demo.sh --tiny: the report's jobs {jobs}: not the example's {sys.argv[2]} with some finished")
PY
  "$build/tests/checker/gantry-check" --config examples/cluster.yaml --trace examples/trace.jsonl \
    --failures examples/failures.jsonl --events "$out/example-events.jsonl" \
    --report "$out/example-report.json" > "$out/check.txt" 2>&1 || { cat "$out/check.txt" >&2; fail "gantry-check failed"; }
  grep -q '^0 violations' "$out/check.txt" || fail "gantry-check: $(tail -1 "$out/check.txt")"
  grep -qi '<html' "$out/example-report.html" || fail "$out/example-report.html is not an HTML page"
  echo "demo.sh --tiny: ok ($(tail -1 "$out/check.txt"))" >&2
  exit 0
fi
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target gantry
mkdir -p out
./build/release/src/gantry sim --events out/example-events.jsonl --report out/example-report.json \
  --html out/example-report.html "$@"
