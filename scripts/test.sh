#!/usr/bin/env bash
# Install what is missing (scripts/setup.sh), then run the whole test suite on the real stack.
# Extra arguments go to pytest, e.g. ./scripts/test.sh -k stack
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
as_root "$@"
"$ROOT/scripts/setup.sh"
cd "$ROOT"
exec "$PY" -m pytest -q "$@"
