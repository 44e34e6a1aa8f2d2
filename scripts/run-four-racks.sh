#!/usr/bin/env bash
# scenarios/four-racks.yaml (16 hosts, 2 spines, 6 jobs) under every policy on the emulated
# cluster (see run-scenario.sh for options; e.g. --runs 3 for 95% confidence intervals).
# About 70 s per policy on 2 cores, plus about 3 min once to measure each job alone.
exec "$(dirname "${BASH_SOURCE[0]}")/run-scenario.sh" four-racks "$@"
