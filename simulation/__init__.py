"""Flow-level (fluid) simulator of distributed-training jobs sharing a leaf-spine network.

    from simulation import simulate, SimConfig, write_results
    res = simulate(resolved_scenario, policy, SimConfig(...))   # -> SimResult
    write_results(res, "results/run1")

See simulation/README.md for the model, the CLI (python -m simulation) and the outputs.
"""
from .engine import SimConfig, SimResult, isolated_times, simulate
from .output import write_results
from .topology import leaf_spine, lingjun_cluster
from .workload import generate

__all__ = ["simulate", "SimConfig", "SimResult", "isolated_times", "write_results",
           "lingjun_cluster", "leaf_spine", "generate"]
