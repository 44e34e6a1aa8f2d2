#!/usr/bin/env bash
# Run sweeps/NAME.yaml (a grid of scenarios x policies x seeds on Ray) and write
# results/sweeps/NAME/<timestamp>/ with sweep.csv, sweep.md and plots.
#   ./scripts/run-sweep.sh NAME [--address auto|HOST:PORT] [--resume] [--max-parallel N] [--out DIR]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
as_root "$@"
name="${1:?usage: run-sweep.sh NAME [options]}"; shift
"$ROOT/scripts/setup.sh" >/dev/null
cd "$ROOT"
exec "$PY" -m analysis sweep "sweeps/$name.yaml" "$@"
