#!/usr/bin/env bash
# The main job: set up what is missing, then run the default scenario (two jobs whose rings
# share a spine link) on the emulated cluster under every policy - fair, optimal, Crux,
# CASSINI, Harmonics - and end with the comparison table and plots in results/.
# Options go to `python -m analysis compare` (e.g. --policies fair,harmonics).
#
# The demo is a quick look: 105 iterations per job (100 measured), about 7 minutes for the
# five policies. The scenario's own length, 505 iterations, is what makes fair sharing's
# figures precise (README, "How many runs"); --iterations 505, or
# ./scripts/run-pair-shared-spine.sh, runs it (about 4.5 minutes a policy).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
as_root "$@"
"$ROOT/scripts/setup.sh"
cd "$ROOT"
echo "demo: every job runs 105 iterations unless --iterations says otherwise (the scenario's own 505 take about 4.5 minutes a policy)" >&2
exec "$PY" -m analysis compare scenarios/pair-shared-spine.yaml --iterations 105 "$@"
