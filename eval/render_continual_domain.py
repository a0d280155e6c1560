"""The report's section 2b (eval/continual_domain.py) and its findings, from continual_domain*.csv."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from eval import analysis
from eval.continual_domain import BEFORE, CATALOGUE, PEERS, RELEASED, SINGLE_WINDOW
from eval.render_more import _pm, _table

LABELS = {
    "sdp_histogram_exact_released": "**stream-dp histogram (exact), released domain**",
    "sdp_topk_released": "**stream-dp top-k, released domain, threshold discovery**",
    "sdp_topk_released_ldt": "stream-dp top-k, released domain, limited-domain discovery (before)",
    "sdp_histogram_exact": "stream-dp histogram (exact), single window",
    "sdp_histogram": "stream-dp histogram (zcdp), single window",
    "sdp_histogram_laplace": "stream-dp histogram (Laplace), single window",
    "sdp_ldt": "stream-dp limited-domain top-k, single window",
    "opendp_laplace_threshold_true_delta": "OpenDP Laplace threshold (true δ)",
    "opendp_gaussian_threshold": "OpenDP Gaussian threshold",
    "pipelinedp_truncated_geometric": "PipelineDP truncated geometric",
    "pipelinedp_laplace_thresholding": "PipelineDP Laplace thresholding",
    "pipelinedp_gaussian_thresholding": "PipelineDP Gaussian thresholding",
    "sdp_histogram_exact_catalogue": "stream-dp histogram (exact) over the catalogue (oracle)",
    "pipelinedp_public_gaussian_catalogue": "PipelineDP public partitions = the catalogue (oracle)",
}
ORDER = (*RELEASED, *BEFORE, *SINGLE_WINDOW, *PEERS, *CATALOGUE)


def _rows(out: Path, name: str = "continual_domain.csv") -> list[dict[str, Any]]:
    path = out / name
    return analysis.read_csv(path) if path.is_file() else []


def findings(out: Path) -> list[str]:
    """Generated bullets of experiment 2b."""
    lines = []
    for v in _rows(out, "continual_domain_verdicts.csv"):
        ratio = "∞" if not math.isfinite(float(v["ratio"])) else f"{float(v['ratio']):.2f}×"
        lines.append(
            f"- **Released domain, {v['cell']}, ε_w = {v['epsilon_w']:g}**: the histogram with a released domain "
            f"{_pm(v['released'], v['released_ci95'])} against {v['best_single_recall']:.2f} for the best single-window "
            f"release ({LABELS.get(v['best_single'], v['best_single'])}: {ratio}) and {v['best_peer_recall']:.2f} for the "
            f"best peer ({LABELS.get(v['best_peer'], v['best_peer'])}; ahead of every peer beyond both intervals: "
            f"{'yes' if v['ahead_of_every_peer'] else 'no'}); released-domain top-k {v['topk_released']:.2f} "
            f"(limited-domain discovery, before: {v['topk_released_before']:.2f}).")
    return lines or ["- Released domain (experiment 2b): not run in this report."]


def section(out: Path) -> str:
    """Section 2b: methods × cells (mean recall@10 over the windows after the first, interval over runs), the
    targets, the tuning of the defaults and the per-window means."""
    rows = _rows(out)
    if not rows:
        return "## 2b. Continual release with a released domain\n\nNot run (no continual_domain.csv).\n"
    main = [r for r in rows if not r["setting"]]
    columns = sorted({(r["cell"], r["epsilon_w"]) for r in main}, key=lambda c: (c[0], c[1]))
    by = {(r["method"], r["cell"], r["epsilon_w"]): r for r in main}
    table = _table(["method", *(f"{c} · ε_w = {e:g}" for c, e in columns)],
                   [[LABELS.get(m, m), *(_pm(by[(m, c, e)]["recall_mean"], by[(m, c, e)]["recall_ci95"])
                                         if (m, c, e) in by else "—" for c, e in columns)]
                    for m in ORDER if any((m, c, e) in by for c, e in columns)])
    verdicts = _table(("cell", "ε_w", "released domain", "best single window", "ratio", "best peer",
                       "ahead of every peer beyond both intervals", "top-k released (after / before)"),
                      [[v["cell"], f"{v['epsilon_w']:g}", _pm(v["released"], v["released_ci95"]),
                        f"{v['best_single_recall']:.2f} ({v['best_single']})",
                        "∞" if not math.isfinite(float(v["ratio"])) else f"{float(v['ratio']):.2f}",
                        f"{v['best_peer_recall']:.2f} ({v['best_peer']})", "yes" if v["ahead_of_every_peer"] else "no",
                        f"{v['topk_released']:.2f} / {v['topk_released_before']:.2f}"]
                       for v in _rows(out, "continual_domain_verdicts.csv")])
    tuned = [r for r in rows if r["setting"]]
    tuning = _table(["method", "setting", *(f"{c} · ε_w = {e:g}" for c, e in columns)],
                    [[LABELS.get(m, m), setting, *(_pm(t[(c, e)]["recall_mean"], t[(c, e)]["recall_ci95"])
                                                   if (c, e) in t else "—" for c, e in columns)]
                     for m, setting, t in _tuning(tuned)]) if tuned else "(not run at this scale)"
    per_window = "\n\n".join(_per_window(out, cell, eps) for cell, eps in columns)
    meta_path = out / "continual_domain_meta.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else None
    real = (meta or {}).get("movielens_real_30d_windows")
    sparse = (f" The real 30-day windows of this MovieLens hold {real['median_users']:g} users at the median and "
              f"{real['max_users']:g} at most ({real['windows']:g} windows): no method releases a key there "
              "(a key needs ≈ 50 users at ε_w = 1), so the MovieLens cell cuts windows by users in arrival order. Its "
              "610 users span 1996-2018, so one window of 100 users spans years of the catalogue: what a window "
              "publishes is rarely the next window's top, and little is published at all."
              if real else "")
    runs = (f" {meta['runs']} production replays and {meta['single_runs']} single-window runs per point."
            if meta else "")
    return f"""## 2b. Continual release with a released domain (`domain_from_released`)

Each window's release learns its domain from what earlier windows *published* (docs/privacy.md §10), against
single-window releases, the public catalogue (an oracle) and the peers, on small windows (`eval/continual_domain.py`;
Δ = 5, k = 10, δ_w = 1e-6 per window). The released-domain methods run through the production release worker
in-process (ingest's store, the real ledger, a real redis-server), windows replayed in order within a run; the
single-window, catalogue and peer methods release each window alone (the same laws, vectorised as in experiment 4).
Cells: MovieLens with its users in arrival order, 100 per window, and the hourly synthetic day with 1,150 and 300
users (≈ 10³ and 250 active per hour). Score: recall@10 averaged over the windows after the first (the first has
nothing to learn from) per run; 95 % intervals over runs.{runs}{sparse}

**Mean recall@10 (windows 2..W)**

{table}

**The targets** (released domain ≥ 1.5× the best single window and ahead of every peer beyond both intervals)

{verdicts}

**Tuning the defaults** (`domain_memory_windows` of the histogram; `releases.topk.discovery_share`; the rows above
run the defaults)

{tuning}

**Per window** (mean recall@10 over runs; window 1 has no earlier window)

{per_window}
"""


def _tuning(tuned: list[dict[str, Any]]) -> list[tuple[str, str, dict[tuple[str, float], dict[str, Any]]]]:
    groups: dict[tuple[str, str], dict[tuple[str, float], dict[str, Any]]] = {}
    for r in tuned:
        groups.setdefault((r["method"], r["setting"]), {})[(r["cell"], r["epsilon_w"])] = r
    return [(m, s, t) for (m, s), t in sorted(groups.items())]


def _per_window(out: Path, cell: str, eps: float) -> str:
    rows = [r for r in _rows(out, "continual_domain_windows.csv")
            if r["cell"] == cell and r["epsilon_w"] == eps and not r["setting"]]
    n = 1 + max(int(r["window_index"]) for r in rows)
    by = {(r["method"], int(r["window_index"])): r for r in rows}
    shown = [m for m in (*RELEASED, *BEFORE, "sdp_histogram_exact", "pipelinedp_gaussian_thresholding",
                         "sdp_histogram_exact_catalogue") if (m, 0) in by]
    return f"*{cell}, ε_w = {eps:g}*\n\n" + _table(
        ["method", *(str(w + 1) for w in range(n))],
        [[LABELS.get(m, m), *(f"{by[(m, w)]['recall_mean']:.2f}" for w in range(n))] for m in shown])
