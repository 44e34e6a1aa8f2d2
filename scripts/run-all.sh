#!/usr/bin/env bash
# Run every scenario's script in turn (emulated ones first); a failing scenario is reported
# and the others still run. Extra arguments go to every script (e.g. --policies fair,harmonics).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
as_root "$@"
failed=()
for s in pair-shared-spine mixed-rack-pair cross-rack-heavy oversubscribed arrivals faults \
         sim-2048-first-fit sim-2048-fragmented sim-lingjun-poisson sim-lingjun-openb; do
  echo "=== $s ==="
  "$ROOT/scripts/run-$s.sh" "$@" || failed+=("$s")
done
if [ ${#failed[@]} -gt 0 ]; then echo "failed: ${failed[*]}"; exit 1; fi
echo "all scenarios done; results under $ROOT/results/"
