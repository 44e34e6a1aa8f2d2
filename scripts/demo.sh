#!/usr/bin/env bash
# The main job: set up what is missing, then run the default scenario (two jobs whose rings
# share a spine link) on the emulated cluster under every policy - fair, optimal, Crux,
# CASSINI, Harmonics - and end with the comparison table and plots in results/.
# Options go to `python -m analysis compare` (e.g. --policies fair,harmonics).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
as_root "$@"
"$ROOT/scripts/setup.sh"
cd "$ROOT"
exec "$PY" -m analysis compare scenarios/pair-shared-spine.yaml "$@"
