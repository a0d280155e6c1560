"""Render ``README.md`` and the figures of the evaluation report from the CSVs in the output directory.

Nothing here computes a result: it reads ``meta.json`` and the CSVs written by :mod:`eval.report`, draws
them and quotes them. Sections whose CSV is missing say so instead of guessing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eval import analysis, plots, render_continual_domain, render_more, render_peers

METHOD_NAMES = plots.LABELS


def _fmt(row: dict[str, Any], metric: str, digits: int = 2) -> str:
    mean, half = row[f"{metric}_mean"], row[f"{metric}_ci95"]
    if mean == "" or (isinstance(mean, float) and math.isnan(mean)):
        return "n/a"
    if half == "" or (isinstance(half, float) and math.isnan(half)):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {half:.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _method_label(row: dict[str, Any]) -> str:
    if row["method"] == "ldt":
        return f"{METHOD_NAMES['ldt']} (k̄ = {row['k_bar']} = {row['k_bar'] // row['k']}k)"
    return METHOD_NAMES[row["method"]]


def headline_rows(rows: Sequence[dict[str, Any]], dataset: str, *, epsilon_w: float = 1.0, delta_keys: int = 5,
                  k: int = 10) -> list[list[str]]:
    """The headline table's rows for one dataset (LDT at every k̄, then the baselines and the ceiling)."""
    cell = analysis.select(rows, dataset=dataset, epsilon_w=epsilon_w, delta_keys=delta_keys, k=k)
    order = {m: i for i, m in enumerate(("ldt", *analysis.BASELINES, "true_topk"))}
    cell.sort(key=lambda r: (order[r["method"]], r["k_bar"] if r["k_bar"] != "" else 0))
    return [[_method_label(r), r["params"], _fmt(r, "precision"), _fmt(r, "recall"), _fmt(r, "keys", 1),
             _fmt(r, "recall_unbounded"), f"{r['empty_fraction']:.2f}"] for r in cell]


HEADLINE_HEADER = ("method", "noise parameters (calibrated)", "precision@k", "recall@k", "keys returned",
                   "recall vs unbounded top-k", "P(no key)")


def _section_setup(meta: dict[str, Any], calib: Sequence[dict[str, Any]]) -> str:
    grid = meta["grid"]
    ds = _table(("dataset", "events", "users", "universe (known only to the full-domain baseline)"),
                [[d["name"], d["events"], d["users"], d["universe"]] for d in meta["datasets"]])
    missing = "" if meta["movielens_present"] or not meta["scale"]["use_movielens"] else (
        "\n**MovieLens was not found**, so only the synthetic stream was evaluated.\n")
    cal = _table(("ε_w", "k", "LDT ε per outcome", "LDT δ_⊥", "full-domain ε per peel", "Laplace (ε, δ)",
                  "select→EM: select (ε, δ), ε per peel", "basic ε_w/k for reference"),
                 [[r["epsilon_w"], r["k"], f"{r['ldt_epsilon_per_outcome']:.4f}", f"{r['ldt_delta_bottom']:g}",
                   f"{r['em_epsilon_per_peel']:.4f}", f"({r['laplace_epsilon']:g}, {r['laplace_delta']:g})",
                   f"({r['split_select_epsilon']:g}, {r['split_select_delta']:g}), {r['split_em_epsilon_per_peel']:.4f}",
                   f"{r['basic_per_outcome']:.4f}"] for r in calib])
    return f"""## 1. Top-k discovery with an unknown domain

**Data.** {missing}
{ds}

Each stream is treated as one window. Contribution bounding is the ingest rule (docs/ingest.md): a user
counts once per key and for at most Δ keys, the first Δ distinct keys in offset (event-time) order; a
key's count is its number of distinct bounded users. MovieLens: user = userId, key = movieId, events in
timestamp order. Synthetic: {meta['scale']['zipf_users']} users each draw 30 keys i.i.d. from
Zipf({meta['scale']['zipf_exponent']}) over {meta['scale']['zipf_universe']} keys (data seed 1, fixed;
the Monte-Carlo runs vary only the mechanisms' noise).

**Methods.**
- *stream-dp LDT*: `stream_dp.mechanisms.limited_domain_topk` (Durfee & Rogers 2019), given the
  window's counts as the release worker reads them (string keys); never sees the universe.
- *full-domain Gumbel top-k*: Gumbel(1/ε) added once to every count of the **known** universe (zeros
  included), top k (peeling exponential mechanism). It cannot run on a stream whose keys are unknown.
- *Laplace threshold → top-k*: partition selection as in Google DP / PipelineDP / OpenDP, implemented
  in `eval/baselines.py` from its definition: Laplace(Δ/ε) on every present count (L1 sensitivity Δ), keep
  keys above τ = 1 + (Δ/ε)·ln(1/(2p)), p = 1 − (1−δ)^(1/Δ) (≈ 1 + (Δ/ε)·ln(Δ/(2δ)); derivation in the
  module docstring: a user's new keys all have count 1, at most Δ of them), then the top k kept keys by
  noisy count (post-processing, free).
- *Laplace select (½) → Gumbel top-k (½)*: the PipelineDP split: half of ε_w and δ_w select the key set,
  a Gumbel top-k over the selected (now public) keys gets the ε the accountant leaves.
- *non-private top-k*: the ceiling (exact bounded top-k).

**Equal privacy per window (the rule).** Every method's *whole* release in a window is (ε_w, δ_w)-DP with
δ_w = {grid['delta_w']:g}, computed by the project's accountant (`stream_dp.accounting.compose`): the
better of basic composition (Σε, Σδ) and the ledger's zCDP conversion (CKS20 Cor. 13: ε = inf over α > 1 of
αρ + (ln(1/δ′) − ln α)/(α − 1) + ln(1 − 1/α), docs/privacy.md §3) with δ′ = δ_w − Σδ. LDT is charged its worst case, k ε-range-bounded outcomes (ρ = kε²/8) with δ_⊥ = δ_w/2 —
what the ledger reserves before the call (pay-what-you-get refunds nothing *within* one window's
guarantee). Each method gets the largest noise parameter meeting ε_w (bisection):

{cal}

**Metrics** (tie-aware): a released key is correct when its true bounded count is at least the k-th
largest. precision@k = correct / released (runs that released nothing are excluded: see P(no key));
recall@k = correct / k; "recall vs unbounded top-k" uses counts without the Δ bound (what a user of the
data would call the truth). Error bars: 95 % normal intervals of the Monte-Carlo mean over
{grid['runs']} runs per point (base seed {meta['seed']}).
"""


def _section_headline(rows: Sequence[dict[str, Any]], names: Sequence[str]) -> str:
    parts = ["### Headline: ε_w = 1, Δ = 5, k = 10\n"]
    for name in names:
        body = headline_rows(rows, name)
        if body:
            parts.append(f"**{name}**\n\n" + _table(HEADLINE_HEADER, body) + "\n")
    return "\n".join(parts)


def _section_verdicts(rows: Sequence[dict[str, Any]]) -> str:
    comps = analysis.comparisons(rows, "recall")
    counts = analysis.verdict_counts(comps)
    deltas = sorted({c["delta_keys"] for c in counts})
    n_cells = len({(r["epsilon_w"], r["k"]) for r in rows})
    grouped: dict[tuple[str, int, str], dict[int, dict[str, Any]]] = {}
    for c in counts:
        grouped.setdefault((c["dataset"], c["k_bar_factor"], c["baseline"]), {})[c["delta_keys"]] = c
    summary = _table(("dataset", "LDT k̄", "against", *(f"Δ = {dk}: better / same / worse" for dk in deltas)),
                     [[d, f"{f}k", METHOD_NAMES[b], *(f"{by[dk]['wins']} / {by[dk]['tie']} / {by[dk]['loses']}"
                                                       if dk in by else "–" for dk in deltas)]
                      for (d, f, b), by in sorted(grouped.items())])
    losses = [c for c in comps if c["verdict"] == "loses" and c["baseline"] != "full_domain_em"]
    worst = sorted(losses, key=lambda c: c["ldt"] - c["baseline_value"])[:8]
    worst_table = _table(("dataset", "Δ", "ε_w", "k", "k̄", "baseline", "LDT recall", "baseline recall"),
                         [[c["dataset"], c["delta_keys"], c["epsilon_w"], c["k"], c["k_bar"],
                           METHOD_NAMES[c["baseline"]], f"{c['ldt']:.2f}", f"{c['baseline_value']:.2f}"]
                          for c in worst]) if worst else "(none)"
    ceiling = sorted(analysis.select(rows, method="true_topk"), key=lambda r: (r["dataset"], r["k"], r["delta_keys"]))
    seen: dict[tuple[str, int, int], float] = {}
    for r in ceiling:
        seen.setdefault((r["dataset"], r["k"], r["delta_keys"]), r["recall_unbounded_mean"])
    bounding = ", ".join(f"{d} k={k} Δ={dk}: {v:.2f}" for (d, k, dk), v in seen.items())
    return f"""### Where stream-dp wins and where it loses (recall@k)

LDT against each baseline, per Δ, counted over the {n_cells} (ε_w, k) cells; "better/worse" means the
difference of the mean recalls exceeds the 95 % half-width of the difference, "same" otherwise.

{summary}

Largest losses against the baselines that, like LDT, need no domain:

{worst_table}

Cost of contribution bounding alone (recall of the exact bounded top-k against the unbounded top-k):
{bounding}.
"""


def _findings_topk(rows: Sequence[dict[str, Any]], names: Sequence[str]) -> list[str]:
    """Generated bullets: the headline cell and how LDT's standing changes with Δ."""
    out = []
    comps = analysis.comparisons(rows, "recall")
    for name in names:
        cell = analysis.select(rows, dataset=name, epsilon_w=1.0, delta_keys=5, k=10)
        ldt = [r for r in cell if r["method"] == "ldt"]
        if not ldt:
            continue
        best = max(ldt, key=lambda r: r["recall_mean"])
        by = {r["method"]: r for r in cell}
        out.append(
            f"- **{name}, ε_w = 1, Δ = 5, k = 10**: LDT's best k̄ ({best['k_bar']}) has recall "
            f"{_fmt(best, 'recall')} and returns no key in {100 * best['empty_fraction']:.0f} % of runs; "
            f"Laplace threshold {_fmt(by['laplace_threshold'], 'recall')}, full-domain Gumbel (knows the "
            f"domain) {_fmt(by['full_domain_em'], 'recall')} with precision {_fmt(by['full_domain_em'], 'precision')}.")
        for base in ("laplace_threshold", "full_domain_em"):
            parts = []
            for dk in sorted({r["delta_keys"] for r in rows}):
                sel = [c for c in comps if c["dataset"] == name and c["baseline"] == base and c["delta_keys"] == dk
                       and c["k_bar"] == 5 * c["k"]]
                if sel:
                    parts.append(f"Δ = {dk}: worse in {sum(c['verdict'] == 'loses' for c in sel)}, better in "
                                 f"{sum(c['verdict'] == 'wins' for c in sel)} of {len(sel)}")
            out.append(f"- {name}, LDT (k̄ = 5k) vs {METHOD_NAMES[base]} over the (ε_w, k) cells — " + "; ".join(parts) + ".")
    return out


def _section_figures(out: Path, rows: Sequence[dict[str, Any]], names: Sequence[str]) -> str:
    lines = ["### Figures\n"]
    for name in names:
        for metric in ("recall", "precision", "keys"):
            path = plots.topk_figure(rows, name, metric, out / f"topk_{name}_{metric}.png")
            lines.append(f"![{name} {metric}]({path.name})\n")
    return "\n".join(lines)


def render_report(out: Path) -> Path:
    """Write ``out/README.md`` (and the figures) from ``out/meta.json`` and the CSVs next to it."""
    meta = json.loads((out / "meta.json").read_text(encoding="utf-8"))
    rows = analysis.read_csv(out / "topk.csv")
    calib = analysis.read_csv(out / "calibration.csv")
    names = [d["name"] for d in meta["datasets"]]
    sections = [
        f"""# stream-dp evaluation

Generated by `{meta['command']}` (scale `{meta['scale']['name']}`, commit {meta['git_commit']}, Python
{meta['python']}, numpy {meta['numpy']}; experiments took {meta['total_seconds']} s). Every number below is
read from the CSVs in this directory; do not edit by hand — rerun the command.
""",
        "## Findings (generated from the CSVs)\n\n" + "\n".join(
            _findings_topk(rows, names) + render_more.findings_continual(out) + render_continual_domain.findings(out)
            + render_more.findings_seeds(out)
            + render_peers.findings(out) + render_more.findings_weighting(out))
        + "\n",
        _section_setup(meta, calib),
        _section_headline(rows, names),
        _section_verdicts(rows),
        _section_figures(out, rows, names),
    ]
    sections += [render_more.section_continual(out), render_continual_domain.section(out), render_more.section_seeds(out),
                 render_peers.section_peers(out), render_peers.section_partial_domain(out),
                 render_more.section_weighting(out)]
    path = out / "README.md"
    path.write_text("\n".join(sections), encoding="utf-8")
    return path
