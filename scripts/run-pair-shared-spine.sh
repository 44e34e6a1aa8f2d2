#!/usr/bin/env bash
# scenarios/pair-shared-spine.yaml under every policy (see run-scenario.sh for options)
exec "$(dirname "${BASH_SOURCE[0]}")/run-scenario.sh" pair-shared-spine "$@"
