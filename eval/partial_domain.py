"""Experiment 4b: a partial catalogue -- the public domain lists only part of the keys.

Experiment 4's "known domain" is the whole universe, the case most favourable to public partitions. A trending
dashboard more often knows *part* of the domain (a catalogue that misses new keys, yesterday's trending
keys), which is what ``releases.histogram.domain`` and ``releases.topk.domain`` with discovery are for. Here
the public domain is a random fraction (:data:`DOMAIN_FRACTION`) of the universe, drawn from a seed per
dataset and never from the data, so it is a valid public input. Same bounded histograms, same (ε_w, δ_w) per
window and the same runs as experiment 4.

stream-dp:

- ``sdp_histogram_exact_partial`` / ``sdp_histogram_laplace_partial``: the histogram release with that
  domain (:func:`eval.peers.sdp_histogram`): every domain key released with its noisy count, a key outside the
  domain only at or above τ -- the same calibration and cost as without a domain (docs/privacy.md §8);
- ``sdp_known_domain_partial``: known-domain top-k with discovery (``api.topk(domain=..., discovery="limited_domain",
  discovery_share=0.2)``, the defaults when this was run, k̄ = 2k; :func:`eval.peers.sdp_topk`; the service's
  defaults are now threshold discovery at 0.8, docs/evaluation 2b): limited-domain top-k discovers keys outside
  the domain, Gumbel top-k tracks domain ∪ discovered. Its per-outcome ε is the largest whose worst case (what the
  ledger reserves) is (ε_w, δ_w)-DP, with the ⊥ rule's δ = δ_w/2
  (:func:`stream_dp.release.window_budget.known_domain_parameters`).

Peers:

- ``pipelinedp_public_gaussian_partial`` / ``_laplace_partial``: PipelineDP with public partitions = the
  domain (:func:`eval.peers.run_pipelinedp_public`): keys outside it are never released;
- the thresholding peers (OpenDP, PipelineDP's partition selection) do not use a domain: their rows are
  experiment 4's no-domain rows (same data, same runs), compared here as they are. So are stream-dp's
  no-domain types: a deployment with a partial domain may also leave it unused.

These cells are not part of the issue's 96-cell grid; the report shows them separately.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from eval.data import Histogram, Stream, bounded_histogram
from eval.peers import (PeerGrid, Release, _ranked, _rows, _timed, cell_verdicts, map_cells,
                        run_pipelinedp_public, sdp_histogram, sdp_histogram_laplace, sdp_topk)
from eval.topk import cell_rng

DOMAIN_FRACTION = 0.5
DISCOVERY_SHARE = 0.2  # limited-domain discovery's share (releases.topk.discovery_share's default then)
DOMAIN_LABEL = "partial"


def partial_domain(universe: int, *, seed: int, dataset: str, fraction: float = DOMAIN_FRACTION) -> np.ndarray:
    """The public domain of ``dataset``: a bool mask over its universe with each key in it independently with
    probability ``fraction`` -- a function of the seed and the dataset's name only, never of its counts."""
    if not 0 < fraction < 1:
        raise ValueError(f"the domain fraction must be in (0, 1), got {fraction!r}")
    return cell_rng(seed, "partial-domain", dataset).random(universe) < fraction


def run_partial_domain_experiment(datasets: Iterable[Stream], grid: PeerGrid, *, seed: int = 20261129,
                                  peers: bool = True, workers: int = 1, cache: Path | None = None
                                  ) -> list[dict[str, Any]]:
    """Rows of the stream-dp methods and PipelineDP's public partitions with the partial domain, per dataset ×
    Δ × ε_w × k (``known_domain`` True, ``domain`` = "partial"); cells in ``workers`` processes
    (:func:`eval.peers.map_cells`; ``cache`` keeps finished cells)."""
    jobs = [(stream.name, hist, domain, dk, eps, grid, seed, peers)
            for stream in datasets
            for domain in (partial_domain(stream.universe, seed=seed, dataset=stream.name),)
            for dk in grid.deltas_keys for hist in (bounded_histogram(stream, dk),) for eps in grid.epsilons]
    rows = map_cells(_cell, jobs, workers, cache=cache)
    for row in rows:
        row["domain"] = DOMAIN_LABEL
        row["domain_fraction"] = DOMAIN_FRACTION
    return rows


def _cell(name: str, hist: Histogram, domain: np.ndarray, dk: int, eps: float, grid: PeerGrid, seed: int,
          peers: bool) -> list[dict[str, Any]]:
    delta, runs, ks = grid.delta_w, grid.runs, grid.ks

    def rng(*tag: Any) -> np.random.Generator:
        return cell_rng(seed, "peers-partial", name, dk, eps, *tag)

    released: dict[str, tuple[Release, float]] = {
        "sdp_histogram_exact_partial": _timed(lambda: sdp_histogram(hist, dk, eps, delta, runs, rng("hist-exact"),
                                                                    domain=domain, exact=True)),
        "sdp_histogram_laplace_partial": _timed(lambda: sdp_histogram_laplace(hist, dk, eps, delta, runs,
                                                                              rng("hist-lap"), domain=domain))}
    if peers:
        for kind in ("gaussian", "laplace"):
            released[f"pipelinedp_public_{kind}_partial"] = _timed(
                lambda kind=kind: run_pipelinedp_public(kind, hist, dk, eps, delta, runs, rng("public", kind),
                                                        domain=domain))
    rows: list[dict[str, Any]] = []
    for method, (rel, sec) in released.items():
        rows += _rows(name, dk, eps, delta, True, method, rel, hist, ks, sec)
    for k in ks:
        t = time.perf_counter()
        keys = sdp_topk(hist, dk, eps, delta, k, runs, rng("dtt", k), domain=domain,
                        discovery="limited_domain", discovery_share=DISCOVERY_SHARE)
        rows += _rows(name, dk, eps, delta, True, "sdp_known_domain_partial", _ranked(keys, k), hist, [k],
                      time.perf_counter() - t)
    return rows


def domainless_rows(peer_rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Experiment 4's no-domain rows (stream-dp's types and the thresholding peers), as rows of the
    partial-domain cells: a method that ignores the domain runs the same with it, on the same data and runs."""
    return [{**r, "known_domain": True, "domain": DOMAIN_LABEL, "domain_fraction": DOMAIN_FRACTION}
            for r in peer_rows if r["known_domain"] is False]


def partial_cell_rows(partial_rows: Sequence[dict[str, Any]], peer_rows: Sequence[dict[str, Any]]
                      ) -> list[dict[str, Any]]:
    """Every row of the partial-domain cells: this experiment's and experiment 4's no-domain rows
    (:func:`domainless_rows`)."""
    return [*partial_rows, *domainless_rows(peer_rows)]


def partial_domain_verdicts(partial_rows: Sequence[dict[str, Any]], peer_rows: Sequence[dict[str, Any]]
                            ) -> list[dict[str, Any]]:
    """:func:`eval.peers.cell_verdicts` of the partial-domain cells: the best stream-dp type there (with the
    domain or ignoring it) against PipelineDP's public partitions on the same domain and every thresholding
    peer."""
    return cell_verdicts(partial_cell_rows(partial_rows, peer_rows))
