"""Experiments users can reproduce: run every policy on a scenario and compare them.

    python -m analysis compare SCENARIO [--policies fair,harmonics] [--out DIR]
    python -m analysis report DIR

``compare`` runs each policy on the scenario's back end (emulator or simulator) into
DIR/<policy>/ and then writes the report; ``report`` (re)builds the report purely from the
files in DIR: comparison.csv, comparison_jobs.csv, pcap_check.csv, comparison.md and
plots/*.png.  See docs/experiments.md.

Library:
    from analysis import generate_report, load_results
    rep = generate_report("results/pair-shared-spine/20250101-120000")
    rep.policy_rows            # the comparison.csv rows (dicts)
"""
from .report import generate_report
from .results import Report, ReportError, load_results

__all__ = ["Report", "ReportError", "generate_report", "load_results"]
