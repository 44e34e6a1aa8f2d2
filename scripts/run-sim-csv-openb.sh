#!/usr/bin/env bash
# scenarios/sim-csv-openb.yaml under every policy (see run-scenario.sh for options)
exec "$(dirname "${BASH_SOURCE[0]}")/run-scenario.sh" sim-csv-openb "$@"
