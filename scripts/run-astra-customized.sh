#!/usr/bin/env bash
# scenarios/astra-customized.yaml under every policy (see run-scenario.sh for options)
exec "$(dirname "${BASH_SOURCE[0]}")/run-scenario.sh" astra-customized "$@"
