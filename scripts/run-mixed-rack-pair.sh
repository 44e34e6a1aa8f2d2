#!/usr/bin/env bash
# scenarios/mixed-rack-pair.yaml under every policy (see run-scenario.sh for options)
exec "$(dirname "${BASH_SOURCE[0]}")/run-scenario.sh" mixed-rack-pair "$@"
