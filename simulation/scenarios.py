"""Regenerate the large simulated scenarios scenarios/sim-*.yaml (deterministic: same
seeds, same files).

  python -m simulation.scenarios
"""
from __future__ import annotations

import sys

from .__main__ import main as cli

SCENARIOS = {
    "sim-2048-first-fit": "--topology leaf-spine --racks 32 --hosts-per-rack 8 --spines 4 --jobs 100 "
                          "--iterations 100 --placement first-fit --seed 1 --epoch 2",
    "sim-2048-fragmented": "--topology leaf-spine --racks 32 --hosts-per-rack 8 --spines 4 --jobs 100 "
                           "--iterations 100 --placement fragmented --seed 1 --epoch 2",
    "sim-lingjun-poisson": "--topology lingjun --jobs 200 --iterations 50 --placement first-fit "
                           "--arrivals poisson --mean-interarrival 2 --seed 2 --epoch 2",
    "sim-lingjun-openb": "--topology lingjun --jobs 200 --iterations 50 --placement fragmented "
                         "--arrivals openb --mean-interarrival 2 --seed 3 --epoch 2",
    # any cluster trace: OpenB's multi-GPU tasks read as a plain CSV (their sizes and times)
    "sim-csv-openb": "--topology leaf-spine --racks 8 --hosts-per-rack 8 --spines 2 --gpus-per-host 2 "
                     "--jobs 20 "
                     "--iterations 30 --placement first-fit "
                     "--arrivals csv:simulation/data/openb2023/openb_gpu_tasks.csv "
                     "--arrival-columns start=creation_time,end=deletion_time,gpus=num_gpu "
                     "--arrival-min-gpus 2 --mean-interarrival 1 --seed 4 --epoch 2",
}


def main() -> int:
    for name, args in SCENARIOS.items():
        rc = cli(["generate", f"scenarios/{name}.yaml"] + args.split())
        if rc:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
