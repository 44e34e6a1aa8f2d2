#!/usr/bin/env bash
# Run every policy of scenarios/NAME.yaml (or those named: --policies fair,harmonics) on the
# scenario's back end and write results/NAME/<timestamp>/ with the comparison and plots.
#   ./scripts/run-scenario.sh NAME [--policies ...] [--out DIR]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
as_root "$@"
name="${1:?usage: run-scenario.sh NAME [options]}"; shift
"$ROOT/scripts/setup.sh" >/dev/null
cd "$ROOT"
exec "$PY" -m analysis compare "scenarios/$name.yaml" "$@"
