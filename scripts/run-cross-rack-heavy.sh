#!/usr/bin/env bash
# scenarios/cross-rack-heavy.yaml under every policy (see run-scenario.sh for options)
exec "$(dirname "${BASH_SOURCE[0]}")/run-scenario.sh" cross-rack-heavy "$@"
