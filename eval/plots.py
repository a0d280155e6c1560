"""Figures of the evaluation report (matplotlib, Agg backend: no display needed).

Every figure carries its parameters and the number of Monte-Carlo runs in its title, and draws 95 %
error bars (:mod:`eval.metrics`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # the backend must be chosen first

LABELS = {
    "ldt": "stream-dp LDT",
    "full_domain_em": "full-domain Gumbel top-k (knows domain)",
    "laplace_threshold": "Laplace threshold → top-k",
    "laplace_then_em": "Laplace select (½) → Gumbel top-k (½)",
    "true_topk": "non-private top-k (ceiling)",
}
STYLES = {
    "full_domain_em": dict(color="tab:orange", marker="s"),
    "laplace_threshold": dict(color="tab:green", marker="^"),
    "laplace_then_em": dict(color="tab:olive", marker="v"),
    "true_topk": dict(color="black", linestyle=":", marker=""),
}
LDT_COLORS = ("tab:blue", "tab:purple", "tab:cyan")


def _series(rows: Sequence[dict[str, Any]]) -> list[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """Group rows of one panel into (label, style, rows sorted by ε) series, LDT once per k̄."""
    out = []
    k_bars = sorted({r["k_bar"] for r in rows if r["method"] == "ldt"})
    for i, kb in enumerate(k_bars):
        sel = [r for r in rows if r["method"] == "ldt" and r["k_bar"] == kb]
        k = sel[0]["k"]
        out.append((f"{LABELS['ldt']} k̄={kb} ({kb // k}k)",
                    dict(color=LDT_COLORS[i % len(LDT_COLORS)], marker="o"), sel))
    for method in ("full_domain_em", "laplace_threshold", "laplace_then_em", "true_topk"):
        sel = [r for r in rows if r["method"] == method]
        if sel:
            out.append((LABELS[method], STYLES[method], sel))
    return [(label, style, sorted(sel, key=lambda r: r["epsilon_w"])) for label, style, sel in out]


def topk_figure(rows: Sequence[dict[str, Any]], dataset: str, metric: str, path: Path) -> Path:
    """Panels Δ × k of ``metric`` (precision, recall, keys) against ε_w for every method."""
    rows = [r for r in rows if r["dataset"] == dataset]
    deltas = sorted({r["delta_keys"] for r in rows})
    ks = sorted({r["k"] for r in rows})
    fig, axes = plt.subplots(len(deltas), len(ks), figsize=(5.2 * len(ks), 3.4 * len(deltas)), squeeze=False,
                             sharex=True)
    for i, dk in enumerate(deltas):
        for j, k in enumerate(ks):
            ax = axes[i][j]
            panel = [r for r in rows if r["delta_keys"] == dk and r["k"] == k]
            for label, style, sel in _series(panel):
                xs = [r["epsilon_w"] for r in sel]
                ys = [r[f"{metric}_mean"] for r in sel]
                es = [r[f"{metric}_ci95"] for r in sel]
                ax.errorbar(xs, ys, yerr=es, label=label, capsize=2, linewidth=1.2, markersize=4, **style)
            ax.set_xscale("log")
            ax.set_title(f"Δ={dk}, k={k}", fontsize=9)
            if metric != "keys":
                ax.set_ylim(-0.03, 1.05)
            if i == len(deltas) - 1:
                ax.set_xlabel("ε per window (whole release)")
            if j == 0:
                ax.set_ylabel(f"{metric}@k" if metric != "keys" else "keys returned")
    runs = max(r["runs"] for r in rows)
    delta_w = rows[0]["delta_w"]
    fig.suptitle(f"{dataset}: {metric} vs ε_w at equal (ε_w, δ_w={delta_w:g}) per window; "
                 f"{runs} runs per point, 95% CI", fontsize=10)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def line_figure(series: Sequence[tuple[str, Sequence[float], Sequence[float], Sequence[float] | None]],
                *, title: str, xlabel: str, ylabel: str, path: Path, logx: bool = False,
                hlines: Sequence[tuple[float, str]] = ()) -> Path:
    """A simple figure of (label, x, y, error-or-None) series, for experiments 2 and 3."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for label, xs, ys, es in series:
        if es is None:
            ax.plot(xs, ys, label=label, marker="o", markersize=3, linewidth=1.2)
        else:
            ax.errorbar(xs, ys, yerr=es, label=label, marker="o", markersize=3, capsize=2, linewidth=1.2)
    for y, label in hlines:
        ax.axhline(y, linestyle="--", color="grey", linewidth=1)
        ax.annotate(label, (0.01, y), xycoords=("axes fraction", "data"), fontsize=8, va="bottom")
    if logx:
        ax.set_xscale("log")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
