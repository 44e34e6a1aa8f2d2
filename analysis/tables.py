"""Formatting and file helpers shared by the report, the repeats and the sweep summaries:
numbers from CSV cells, means and ratios that skip missing values, CSV in and out, the
figures' text form, and Markdown tables."""
from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import List, Sequence

import numpy as np

KNOWN_ORDER = ["fair", "optimal", "crux", "cassini", "harmonics"]


def num(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def mean_finite(xs) -> float:
    v = [x for x in xs if finite(x)]
    return float(np.mean(v)) if v else math.nan


def ratio(a: float, b: float) -> float:
    return a / b if finite(a) and finite(b) and b != 0 else math.nan


def read_csv(path: Path) -> List[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def csv_value(x) -> str:
    if isinstance(x, float):
        return "" if math.isnan(x) else f"{x:.6g}"
    return "" if x is None else str(x)


def write_csv(path: Path, cols: Sequence[str], rows: Sequence[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            w.writerow([csv_value(r.get(c)) for c in cols])


def fmt_s(x) -> str:
    """Seconds for a table: enough digits for 10 ms iterations and 1000 s JCTs."""
    if not finite(x):
        return "–"
    a = abs(x)
    return f"{x:.4f}" if a < 1 else f"{x:.3f}" if a < 100 else f"{x:.1f}"


def fmt_r(x) -> str:
    return f"{x:.3f}" if finite(x) else "–"


def fmt_ms(x) -> str:
    return f"{x:.2f}" if finite(x) else "–"


def policy_order(names) -> List[str]:
    names = list(dict.fromkeys(names))
    known = [p for p in KNOWN_ORDER if p in names]
    return known + sorted(p for p in names if p not in KNOWN_ORDER)


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]], right_from: int = 1,
             right=None) -> List[str]:
    """A Markdown table; numbers right-aligned: columns ``right`` (default from right_from on)."""
    right = set(right if right is not None else range(right_from, len(header)))
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---:" if i in right else "---" for i in range(len(header))) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c).replace("|", "/") for c in r) + " |")
    return out

