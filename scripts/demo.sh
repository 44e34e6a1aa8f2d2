#!/usr/bin/env bash
# The main job: set up what is missing, bring the emulated leaf-spine cluster up under the
# controller, check it with real traffic, and print the table.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
as_root "$@"
"$ROOT/scripts/setup.sh"
cd "$ROOT"
exec "$PY" -m emulation check scenarios/leaf-spine-2x2x2.yaml "$@"
