#!/usr/bin/env bash
# scenarios/sim-2048-first-fit.yaml under every policy (see run-scenario.sh for options)
exec "$(dirname "${BASH_SOURCE[0]}")/run-scenario.sh" sim-2048-first-fit "$@"
