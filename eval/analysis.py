"""Reading the experiment-1 CSV: the headline table and where stream-dp loses (generated, never typed in).

A difference between two Monte-Carlo means is called *significant* when it exceeds the 95 % half-width of
the difference, sqrt(h₁² + h₂²) (independent runs).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

BASELINES = ("full_domain_em", "laplace_threshold", "laplace_then_em")


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    """Write rows (dicts with the same keys) as CSV."""
    if not rows:
        raise ValueError(f"no rows to write to {path}")
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)
    return path


def _parse(value: str) -> Any:
    if value == "":
        return ""
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    if value in ("True", "False"):
        return value == "True"
    return value


def read_csv(path: Path) -> list[dict[str, Any]]:
    """Rows of a CSV written by :func:`write_csv`, numbers parsed back (empty cells stay "").

    >>> import tempfile, os
    >>> p = Path(tempfile.mkdtemp()) / "t.csv"
    >>> _ = write_csv(p, [{"a": 1, "b": 0.5, "c": "", "d": "x"}])
    >>> read_csv(p)
    [{'a': 1, 'b': 0.5, 'c': '', 'd': 'x'}]
    """
    with open(path, newline="", encoding="utf-8") as fh:
        return [{k: _parse(v) for k, v in row.items()} for row in csv.DictReader(fh)]


def select(rows: Iterable[dict[str, Any]], **where: Any) -> list[dict[str, Any]]:
    """Rows whose fields equal every ``where`` value (floats compared with a tolerance)."""
    def match(row: dict[str, Any]) -> bool:
        for key, want in where.items():
            got = row.get(key)
            if isinstance(want, float) or isinstance(got, float):
                if got == "" or not math.isclose(float(got), float(want), rel_tol=1e-9):
                    return False
            elif got != want:
                return False
        return True
    return [r for r in rows if match(r)]


def significantly_less(a: dict[str, Any], b: dict[str, Any], metric: str) -> bool:
    """Is ``a``'s mean of ``metric`` below ``b``'s by more than the 95 % half-width of the difference?"""
    ma, mb = a[f"{metric}_mean"], b[f"{metric}_mean"]
    if ma == "" or mb == "" or math.isnan(ma) or math.isnan(mb):
        return False
    ha = a[f"{metric}_ci95"] if a[f"{metric}_ci95"] != "" and not math.isnan(a[f"{metric}_ci95"]) else 0.0
    hb = b[f"{metric}_ci95"] if b[f"{metric}_ci95"] != "" and not math.isnan(b[f"{metric}_ci95"]) else 0.0
    return mb - ma > math.hypot(ha, hb)


def cells(rows: Iterable[dict[str, Any]]) -> list[tuple[str, int, float, int]]:
    """The distinct (dataset, Δ, ε_w, k) cells, in a stable order."""
    return sorted({(r["dataset"], r["delta_keys"], r["epsilon_w"], r["k"]) for r in rows})


def comparisons(rows: Sequence[dict[str, Any]], metric: str = "recall") -> list[dict[str, Any]]:
    """For every cell, LDT at each k̄ against each baseline: who is significantly better on ``metric``."""
    out = []
    for dataset, dk, eps, k in cells(rows):
        cell = select(rows, dataset=dataset, delta_keys=dk, epsilon_w=eps, k=k)
        for ldt in select(cell, method="ldt"):
            for base in BASELINES:
                for b in select(cell, method=base):
                    verdict = ("loses" if significantly_less(ldt, b, metric)
                               else "wins" if significantly_less(b, ldt, metric) else "tie")
                    out.append({"dataset": dataset, "delta_keys": dk, "epsilon_w": eps, "k": k,
                                "k_bar": ldt["k_bar"], "baseline": base, "metric": metric,
                                "ldt": ldt[f"{metric}_mean"], "baseline_value": b[f"{metric}_mean"],
                                "verdict": verdict})
    return out


def verdict_counts(comps: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (dataset, k̄ factor, baseline, Δ): in how many (ε_w, k) cells LDT wins, ties, loses.

    >>> c = {"dataset": "d", "k": 10, "k_bar": 50, "baseline": "b", "delta_keys": 5}
    >>> verdict_counts([c | {"verdict": "wins"}, c | {"verdict": "loses"}, c | {"verdict": "loses"}])
    [{'dataset': 'd', 'k_bar_factor': 5, 'baseline': 'b', 'delta_keys': 5, 'wins': 1, 'tie': 0, 'loses': 2}]
    """
    table: dict[tuple[str, int, str, int], dict[str, int]] = {}
    for c in comps:
        key = (c["dataset"], c["k_bar"] // c["k"], c["baseline"], c["delta_keys"])
        entry = table.setdefault(key, {"wins": 0, "tie": 0, "loses": 0})
        entry[c["verdict"]] += 1
    return [{"dataset": d, "k_bar_factor": f, "baseline": b, "delta_keys": dk, **v}
            for (d, f, b, dk), v in sorted(table.items())]
