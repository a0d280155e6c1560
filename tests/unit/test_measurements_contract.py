"""Contract of every release type's measurement (stream_dp.mechanisms.measurement): its privacy map.

For every type in the one list of release types (``RELEASE_TYPES``, the config's ``[releases.*]`` sections)
and the known-domain variant of ``topk``, over many random windows:

- the reservation (``privacy_map()``) is the worst case of the docs/privacy.md table;
- the realized events of each result are the table's row for what was released (computed here, by the test,
  from the published record: items, ⊥, discovered keys, instance openings) and never exceed the
  reservation in ρ, δ or basic ε;
- the release builder the worker uses charges exactly those realized events, and the budget plan / start
  check reserve exactly the privacy maps.

The last tests run the same checks on deliberately broken measurements (over-reporting, under-reporting,
under-reserving) and require them to fail.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stream_dp.mechanisms.count_parts import CountParts
from stream_dp.accounting.composition import compose
from stream_dp.accounting.events import (
    ApproxDpEvent,
    DpEvent,
    PureDpEvent,
    RangeBoundedEvent,
    ZCdpAndApproxDpEvent,
    ZCdpEvent,
)
from stream_dp.config import RELEASE_TYPES, Config, config_from_mapping
from stream_dp.mechanisms import LimitedDomainTopk
from stream_dp.node_batches import ReadStep
from stream_dp.release.alerts import AlertsRun
from stream_dp.release.budget_plan import plan_for
from stream_dp.release.builders import TopkBuilder, alerts_measurement
from stream_dp.release.types import BUILDERS, release_measurements
from stream_dp.release.records import RecordDraft
from stream_dp.store.keys import Keys
from stream_dp.release.window_budget import (LEGACY_TOPK, configured_topk, known_domain_parameters, topk_parameters,
                                             window_epsilon)
from stream_dp.release.windows import Window, WindowCounts

DOCS = Path(__file__).resolve().parents[2] / "docs" / "privacy.md"
SIZE = 3600
WINDOWS = 40
DELTA = 1e-6


class MemoryWindow:
    """The reads a builder makes, from one in-memory window (the Redis reader is tested on real Redis in
    tests/integration/test_release_windows.py; here only the privacy maps are under test)."""

    keys = Keys("memory")  # one unsharded window (argmax's prefix reads size themselves by it)
    read_chunk = 50_000

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts
        # ZRANGE order: ascending count, then member
        self.ranked = sorted(counts, key=lambda k: (counts[k], k.encode()))

    def top_counts(self, window: Window, n: int) -> ReadStep:
        return ReadStep(lambda: {k: float(self.counts[k]) for k in list(reversed(self.ranked))[:n]})

    def counts_of(self, window: Window, keys: list[str]) -> ReadStep:
        return ReadStep(lambda: {k: float(self.counts.get(k, 0)) for k in keys})

    def all_counts(self, window: Window) -> WindowCounts:
        return WindowCounts(list(self.counts), np.array([float(v) for v in self.counts.values()]))

    def count_parts(self, window: Window) -> CountParts:
        return CountParts.whole(self.counts)

    def bounding_pairs(self, window: Window) -> list[tuple[str, str]]:
        """Counted (user, key) pairs with these counts, users on 1 to 3 keys (Δ = 3 in :func:`config_for`): the
        j-th user of key k_i is user j of group i // 3, and groups of 3 keys share users."""
        return [(f"u{j}-g{int(key[1:]) // 3}", key) for key, c in self.counts.items() for j in range(c)]

    def count_histogram(self, window: Window) -> list[tuple[float, int]]:
        values = sorted(self.counts.values())
        return [(float(v), values.count(v)) for v in sorted(set(values))]

    def members_at(self, window: Window, ranks: np.ndarray, counts: np.ndarray) -> list[str]:
        keys = [self.ranked[int(r)] for r in ranks]
        assert [self.counts[k] for k in keys] == [int(c) for c in counts]
        return keys


def random_window(rng: np.random.Generator) -> dict[str, int]:
    """Windows from empty to a few hundred keys, heavy-tailed, so that ⊥ and full releases both occur."""
    n = int(rng.choice([0, 1, 3, 10, 60, 300]))
    scale = float(rng.choice([1, 5, 50, 5000]))
    return {f"k{i}": 1 + int(rng.pareto(1.2) * scale) for i in range(n)}


# --- the docs/privacy.md table, as test-owned formulas ------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One release type (or variant) under contract: its config, the table row it must match, and the
    table's events of a published draft (``realized``) and of the worst case (``reserved``)."""

    release_type: str
    config: dict[str, Any]
    row: str  # how the row of the docs table starts
    realized: Callable[[Config, RecordDraft], tuple[DpEvent, ...]]
    reserved: Callable[[Config], tuple[DpEvent, ...]]


def _topk_realized(cfg: Config, d: RecordDraft) -> tuple[DpEvent, ...]:
    # per-outcome ε and δ_⊥: the old keys', or from the window budget
    p = configured_topk(cfg.releases.topk, max_keys_per_user=cfg.contribution.max_keys_per_user)
    return (RangeBoundedEvent(p.epsilon, count=len(d.items) + int(bool(d.hit_bottom)), delta=p.delta,
                              mechanism="limited_domain_topk"),)


def _topk_window_reserved(cfg: Config) -> tuple[DpEvent, ...]:
    t = cfg.releases.topk
    p = topk_parameters(t.window_epsilon, t.window_delta, t.k)
    return (RangeBoundedEvent(p.epsilon, count=t.k, delta=t.window_delta / 2, mechanism="limited_domain_topk"),)


def _histogram_window_map(cfg: Config, d: RecordDraft | None = None) -> tuple[DpEvent, ...]:
    """The zcdp histogram at the window budget: ρ from ε_w at δ_w/2, the threshold for the other half."""
    from stream_dp.mechanisms.gaussian_histogram import calibrate_histogram

    h = cfg.releases.histogram
    dk = cfg.contribution.max_keys_per_user
    sigma2 = calibrate_histogram(epsilon=h.window_epsilon, threshold_delta=h.window_delta / 2,
                                 conversion_delta=h.window_delta / 2, max_keys_per_user=dk).sigma2
    return (ZCdpEvent(dk / (2 * float(sigma2)), delta=h.window_delta / 2, mechanism="gaussian_histogram"),)


def _per_outcome(cfg: Config) -> tuple[float, float]:
    """Known-domain top-k's per-outcome ε and its discovery's δ: the deprecated keys as given, or -- from the window
    budget -- the ε the calibration solved for (ε_t / √(1 − share)) and δ_w/2."""
    t = cfg.releases.topk
    if t.epsilon is not None:
        return t.epsilon, t.delta if t.delta is not None else LEGACY_TOPK[1]
    q = known_domain_parameters(t.window_epsilon, t.window_delta, t.k, t.discovery_share, discovery=t.discovery,
                                max_keys_per_user=cfg.contribution.max_keys_per_user)
    return q.track_epsilon / math.sqrt(1 - t.discovery_share), t.window_delta / 2


def _split(cfg: Config) -> tuple[float, float]:
    t = cfg.releases.topk
    epsilon = _per_outcome(cfg)[0]
    return epsilon * math.sqrt(1 - t.discovery_share), epsilon * math.sqrt(t.discovery_share)


def _known_realized(cfg: Config, d: RecordDraft) -> tuple[DpEvent, ...]:
    track, discover = _split(cfg)
    out: list[DpEvent] = [RangeBoundedEvent(discover, count=len(d.info["discovered"]) + int(bool(d.hit_bottom)),
                                            delta=_per_outcome(cfg)[1], mechanism="limited_domain_topk")]
    if d.items:
        out.append(RangeBoundedEvent(track, count=len(d.items), mechanism="known_domain_gumbel_topk"))
    return tuple(out)


def _known_reserved(cfg: Config) -> tuple[DpEvent, ...]:
    t = cfg.releases.topk
    track, discover = _split(cfg)
    return (RangeBoundedEvent(discover, count=t.k, delta=_per_outcome(cfg)[1], mechanism="limited_domain_topk"),
            RangeBoundedEvent(track, count=t.k, mechanism="known_domain_gumbel_topk"))


def _discovery_histogram(cfg: Config) -> tuple[ZCdpEvent, int]:
    """Threshold discovery's event, recomputed from its definition: ρ_d = share·kε²/8, σ² = Δ/(2ρ_d) on the
    1/1000 grid (rounded up), τ for δ_τ ≤ the discovery's δ (releases.topk.delta, or window_delta/2)."""
    from fractions import Fraction

    from stream_dp.mechanisms.gaussian_histogram import selection_delta

    t, dk = cfg.releases.topk, cfg.contribution.max_keys_per_user
    epsilon, delta = _per_outcome(cfg)
    rho = t.discovery_share * t.k * epsilon ** 2 / 8
    sigma2 = Fraction(math.ceil(Fraction(dk) / Fraction(2 * rho) * 1000), 1000)
    tau = 1
    while selection_delta(sigma2=sigma2, threshold=tau, max_keys_per_user=dk) > delta * (1 - 1e-9):
        tau += 1
    return ZCdpEvent(dk / (2 * float(sigma2)), delta=delta, mechanism="gaussian_histogram"), tau


def _threshold_known_realized(cfg: Config, d: RecordDraft) -> tuple[DpEvent, ...]:
    track, _ = _split(cfg)
    event, tau = _discovery_histogram(cfg)
    assert d.parameters["discovery_threshold"] == tau and not d.hit_bottom
    out: list[DpEvent] = [event]
    if d.items:
        out.append(RangeBoundedEvent(track, count=len(d.items), mechanism="known_domain_gumbel_topk"))
    return tuple(out)


def _threshold_known_reserved(cfg: Config) -> tuple[DpEvent, ...]:
    track, _ = _split(cfg)
    return (_discovery_histogram(cfg)[0],
            RangeBoundedEvent(track, count=cfg.releases.topk.k, mechanism="known_domain_gumbel_topk"))


def _threshold_window_reserved(cfg: Config) -> tuple[DpEvent, ...]:
    """Threshold discovery at a window budget: the events from their definition, and they meet the budget."""
    t = cfg.releases.topk
    events = _threshold_known_reserved(cfg)
    assert window_epsilon(events, t.window_delta) <= t.window_epsilon * (1 + 1e-12)
    return events


def _alerts_map(cfg: Config) -> tuple[DpEvent, ...]:
    return (PureDpEvent(cfg.releases.alerts.epsilon, mechanism="adaptive_svt"),)


def _sample_map(cfg: Config, d: RecordDraft | None = None) -> tuple[DpEvent, ...]:
    s, dk = cfg.releases.sample, cfg.contribution.max_keys_per_user
    return (ApproxDpEvent(s.window_epsilon / dk, s.window_delta / dk, count=dk, mechanism="private_weighted_sample"),)


def _argmax_map(cfg: Config, d: RecordDraft | None = None) -> tuple[DpEvent, ...]:
    a = cfg.releases.argmax
    return (ApproxDpEvent(a.window_epsilon, a.window_delta, mechanism="large_margin"),)


def _watch_map(cfg: Config, d: RecordDraft | None = None) -> tuple[DpEvent, ...]:
    return (PureDpEvent(cfg.releases.watch_topk.window_epsilon, mechanism="noisy_topk_with_gap"),)


def _histogram_map(cfg: Config, d: RecordDraft | None = None) -> tuple[DpEvent, ...]:
    from fractions import Fraction

    from stream_dp.mechanisms.gaussian_histogram import calibrate_histogram

    h = cfg.releases.histogram
    dk = cfg.contribution.max_keys_per_user
    sigma2 = Fraction(d.parameters["sigma2"]) if d is not None else calibrate_histogram(
        epsilon=h.epsilon, threshold_delta=h.delta, conversion_delta=cfg.budget.delta_prime,
        max_keys_per_user=dk).sigma2
    return (ZCdpEvent(dk / (2 * float(sigma2)), delta=h.delta, mechanism="gaussian_histogram"),)


def _exact_histogram_map(cfg: Config, d: RecordDraft | None = None) -> tuple[DpEvent, ...]:
    from fractions import Fraction

    from stream_dp.mechanisms.gaussian_histogram import selection_delta
    from stream_dp.mechanisms.sparse_gaussian_profile import calibrate_exact, sparse_histogram_delta

    h = cfg.releases.histogram
    dk = cfg.contribution.max_keys_per_user
    total = h.delta + cfg.budget.delta_prime  # the exact calibration's single-release δ
    if d is not None:
        sigma2, tau = Fraction(d.parameters["sigma2"]), d.parameters["threshold"]
        assert d.parameters["calibration"] == "exact"
    else:
        exact = calibrate_exact(epsilon=h.epsilon, delta=total, max_keys_per_user=dk)
        sigma2, tau = exact.sigma2, exact.threshold
    # the published (σ², τ) really are (ε, δ + δ′)-DP by the exact profile
    assert sparse_histogram_delta(sigma2=sigma2, threshold=tau, max_keys_per_user=dk, epsilon=h.epsilon) <= total
    # the zCDP route's δ: the threshold's δ_τ with a 1e-8 relative float margin, never above δ (δ_τ ≤ δ exactly)
    tau_delta = min(total, selection_delta(sigma2=sigma2, threshold=tau, max_keys_per_user=dk) * (1 + 1e-8))
    return (ZCdpAndApproxDpEvent(dk / (2 * float(sigma2)), tau_delta, h.epsilon, total, mechanism="gaussian_histogram"),)


def _laplace_histogram_map(cfg: Config, d: RecordDraft | None = None) -> tuple[DpEvent, ...]:
    from fractions import Fraction

    from stream_dp.mechanisms.laplace_histogram import calibrate_laplace_histogram

    h = cfg.releases.histogram
    dk = cfg.contribution.max_keys_per_user
    scale = Fraction(d.parameters["scale"]) if d is not None else calibrate_laplace_histogram(
        epsilon=h.epsilon, threshold_delta=h.delta, max_keys_per_user=dk).scale
    return (ApproxDpEvent(dk / float(scale), h.delta, mechanism="laplace_histogram"),)


def _weighted_histogram_map(cfg: Config, d: RecordDraft | None = None) -> tuple[DpEvent, ...]:
    from fractions import Fraction

    from stream_dp.mechanisms.weighted_histogram import calibrate_weighted_histogram

    h = cfg.releases.histogram
    dk = cfg.contribution.max_keys_per_user
    if d is not None:  # the record states σ² in count units (σ_w² / U²) and U
        assert d.parameters["weighting"] == "per_user"
        sigma2_counts = Fraction(d.parameters["sigma2"])
    else:
        cal = calibrate_weighted_histogram(epsilon=h.epsilon, threshold_delta=h.delta,
                                           conversion_delta=cfg.budget.delta_prime, max_keys_per_user=dk)
        sigma2_counts = cal.sigma2 / (cal.unit * cal.unit)
    # the scores' L2 sensitivity is U·√Δ and their σ_w = U·σ: the uniform histogram's ρ at σ
    return (ZCdpEvent(dk / (2 * float(sigma2_counts)), delta=h.delta, mechanism="weighted_histogram"),)


CASES: dict[str, Case] = {
    "topk": Case("topk", {"topk": {"k": 5, "k_bar": 8, "epsilon": 0.7, "delta": DELTA}}, "| `topk` limited-domain",
                 _topk_realized,
                 lambda cfg: (RangeBoundedEvent(0.7, count=5, delta=DELTA, mechanism="limited_domain_topk"),)),
    "topk_window_budget": Case("topk", {"topk": {"k": 5, "k_bar": 8, "window_epsilon": 2.0, "window_delta": 2 * DELTA}},
                               "| `topk` limited-domain", _topk_realized, _topk_window_reserved),
    "topk_known_domain": Case(
        "topk", {"topk": {"k": 4, "k_bar": 6, "epsilon": 0.8, "delta": DELTA, "discovery_share": 0.3,
                          "discovery": "limited_domain", "domain": ["k0", "k1", "k2", "never-seen"]}},
        "| `topk` with a known domain, limited-domain discovery", _known_realized, _known_reserved),
    "topk_known_domain_threshold": Case(
        "topk", {"topk": {"k": 4, "k_bar": 6, "epsilon": 3.0, "delta": DELTA, "discovery_share": 0.6,
                          "domain": ["k0", "k1", "k2", "never-seen"]}},
        "| `topk` with a known domain, threshold discovery", _threshold_known_realized, _threshold_known_reserved),
    "topk_known_domain_threshold_window_budget": Case(
        "topk", {"topk": {"k": 4, "k_bar": 6, "window_epsilon": 6.0, "window_delta": 2 * DELTA,
                          "domain": ["k0", "k1", "k2", "never-seen"]}},  # the default discovery: threshold at 0.8
        "| `topk` with a known domain, threshold discovery", _threshold_known_realized, _threshold_window_reserved),
    "alerts": Case("alerts", {"alerts": {"enabled": True, "watchlist": [f"k{i}" for i in range(12)],
                                         "threshold": 30, "k": 2, "epsilon": 0.6}},
                   "| `alerts`", lambda cfg, d: _alerts_map(cfg) if d.info.get("opened") else (), _alerts_map),
    "sample": Case("sample", {"sample": {"enabled": True, "scheme": "pps", "tau": 0.05, "window_epsilon": 1.0,
                                         "window_delta": DELTA}}, "| `sample`", _sample_map, _sample_map),
    "argmax": Case("argmax", {"argmax": {"enabled": True, "window_epsilon": 1.0, "window_delta": DELTA}},
                   "| `argmax`", _argmax_map, _argmax_map),
    "watch_topk": Case("watch_topk", {"watch_topk": {"enabled": True, "k": 3, "window_epsilon": 0.5}},
                       "| `watch_topk`", _watch_map, _watch_map),
    "histogram": Case("histogram", {"histogram": {"enabled": True, "epsilon": 1.0, "delta": DELTA, "max_keys": 20}},
                      "| `histogram` (gaussian, zcdp", _histogram_map, _histogram_map),
    "histogram_window_budget": Case(
        "histogram", {"histogram": {"enabled": True, "window_epsilon": 1.0, "window_delta": 2 * DELTA, "max_keys": 20}},
        "| `histogram` (gaussian, zcdp", _histogram_window_map, _histogram_window_map),
    "histogram_exact": Case(
        "histogram", {"histogram": {"enabled": True, "calibration": "exact", "epsilon": 1.0, "delta": DELTA,
                                    "max_keys": 20}},
        "| `histogram` (gaussian, exact", _exact_histogram_map, _exact_histogram_map),
    "histogram_laplace": Case(
        "histogram", {"histogram": {"enabled": True, "noise": "laplace", "epsilon": 1.0, "delta": DELTA,
                                    "max_keys": 20}},
        "| `histogram` (laplace", _laplace_histogram_map, _laplace_histogram_map),
    "histogram_weighted": Case(
        "histogram", {"histogram": {"enabled": True, "weighting": "per_user", "epsilon": 1.0, "delta": DELTA,
                                    "max_keys": 20}},
        "| `histogram` (per_user weighting", _weighted_histogram_map, _weighted_histogram_map),
}


def config_for(case: Case) -> Config:
    """Only ``case``'s type enabled (plus ``[contribution]`` Δ = 3, so per-key maps are not trivial)."""
    releases: dict[str, Any] = {t: {"enabled": False} for t in RELEASE_TYPES}
    for name, section in case.config.items():
        releases[name] = {**section, "enabled": True}
    return config_from_mapping({"releases": releases, "contribution": {"max_keys_per_user": 3},
                                "windows": {"size_seconds": SIZE}})


# --- the checks -------------------------------------------------------------------------------------------


def assert_within(realized: tuple[DpEvent, ...], reserved: tuple[DpEvent, ...]) -> None:
    got, cap = compose(realized), compose(reserved)
    for name in ("rho", "zcdp_delta", "basic_epsilon", "basic_delta"):
        assert getattr(got, name) <= getattr(cap, name) * (1 + 1e-12), (
            f"realized {name} {getattr(got, name)} exceeds the reservation {getattr(cap, name)}")


def check_batch(case: Case, builder_type: Callable[[Config], Any], windows: int = WINDOWS) -> set[int]:
    """Run ``builder_type`` (a release builder) on random windows; returns the realized event counts seen."""
    cfg = config_for(case)
    builder = builder_type(cfg)
    public = getattr(builder, "public_domain", None)
    if public is not None and public.rule is not None:  # a released domain (the worker gives the reader)
        public.reader = KeysPublishedEarlier(("k1", "k4", "never-seen"))
    reserved = tuple(builder.measurement.privacy_map())
    assert reserved == case.reserved(cfg), "the reservation is not the docs table's worst case"
    rng = np.random.default_rng(20)
    watch = [f"k{i}" for i in range(6)]
    seen: set[int] = set()
    for i in range(windows):
        window, counts = Window(i * SIZE, (i + 1) * SIZE), random_window(rng)
        draft = builder.run(window, builder.read(MemoryWindow(counts), window, watch).now(), rng)
        assert tuple(draft.events) == case.realized(cfg, draft), "the charged events are not the docs table's"
        assert_within(tuple(draft.events), reserved)
        seen.add(sum(getattr(e, "count", 1) for e in draft.events))
    return seen


class KeysPublishedEarlier:
    """Stands in for the worker's ReleasedDomainReader: the same learned keys for every window (the maps must not
    depend on the domain)."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys

    def domain_for(self, window: Window, rule: Any) -> Any:
        from stream_dp.release.released_domain import LearnedDomain

        return LearnedDomain(self.keys, rule, (window.start - SIZE,), len(self.keys))


def check_alerts(case: Case, measurement_for: Callable[[Any], Any] = alerts_measurement) -> int:
    """Chain windows of alerts (an instance opens, continues, exhausts, a new one opens); returns openings."""
    cfg = config_for(case)
    reserved = tuple(measurement_for(cfg.releases.alerts).privacy_map())
    assert reserved == case.reserved(cfg), "the reservation is not the docs table's instance opening"
    rng = np.random.default_rng(21)
    state, opened = None, 0
    for i in range(WINDOWS):
        window, counts = Window(i * SIZE, (i + 1) * SIZE), random_window(rng)
        run = AlertsRun(cfg.releases.alerts, window, "scope-1", state, list(cfg.releases.alerts.watchlist), rng=rng,
                        measurement=measurement_for(cfg.releases.alerts))
        assert run.open_events == (reserved if run.opens else ())
        draft, state = run.answer({k: float(v) for k, v in counts.items()})
        assert tuple(draft.events) == case.realized(cfg, draft), "the charged events are not the docs table's"
        assert_within(tuple(draft.events), reserved)
        if run.svt is not None:  # Theorem 5.1: the answers' realized loss stays within the instance's ε
            assert run.svt.spent <= cfg.releases.alerts.epsilon * (1 + 1e-12)
        opened += int(run.opens)
    return opened


def test_every_release_type_is_under_contract() -> None:
    """A new [releases.*] section cannot be forgotten: it needs a builder (or is alerts) and a case here."""
    assert {case.release_type for case in CASES.values()} == set(RELEASE_TYPES)
    assert set(BUILDERS) == set(RELEASE_TYPES) - {"alerts"}


@pytest.mark.parametrize("name", list(CASES))
def test_the_docs_table_names_the_events_of_each_type(name: str) -> None:
    case = CASES[name]
    rows = [line for line in DOCS.read_text(encoding="utf-8").splitlines() if line.startswith(case.row)]
    assert len(rows) == 1, f"docs/privacy.md has no single cost row starting {case.row!r}"
    event_column = rows[0].split("|")[2]
    cfg = config_for(case)
    kinds = {type(e).__name__ for e in case.reserved(cfg)}
    assert kinds and all(re.search(rf"`{kind}\(", event_column) for kind in kinds), (rows[0], kinds)


@pytest.mark.parametrize("name", [n for n in CASES if CASES[n].release_type != "alerts"])
def test_batch_types_reserve_their_map_and_charge_the_realized_events(name: str) -> None:
    case = CASES[name]
    seen = check_batch(case, BUILDERS[case.release_type])
    if name == "topk":
        assert len(seen) > 1  # pay-what-you-get happened: ⊥ ended some releases early


def test_alerts_reserve_an_instance_opening_and_charge_only_openings() -> None:
    assert check_alerts(CASES["alerts"]) >= 2  # instances exhausted and new ones opened


@pytest.mark.parametrize("name", list(CASES))
def test_the_budget_plan_and_start_check_use_exactly_the_privacy_maps(name: str) -> None:
    case = CASES[name]
    cfg = config_for(case)
    measurements = release_measurements(cfg)
    assert list(measurements) == [case.release_type]
    (measurement,) = measurements.values()
    assert measurement.privacy_map() == case.reserved(cfg)
    plan = plan_for(cfg)
    planned = plan.alerts_instance if case.release_type == "alerts" else plan.per_window[case.release_type]
    assert tuple(planned) == case.reserved(cfg)


def test_realized_refuses_a_result_that_is_not_the_measurements() -> None:
    m = LimitedDomainTopk(k=2, k_bar=4, epsilon=0.5, delta=DELTA, max_keys_per_user=1)
    other = LimitedDomainTopk(k=4, k_bar=4, epsilon=0.5, delta=DELTA, max_keys_per_user=1)
    big = other({f"k{i}": 1000 * (i + 1) for i in range(6)}, rng=1)
    assert big.outcomes > 2
    with pytest.raises(ValueError, match="not one of this measurement's"):
        m.realized(big)


# --- broken variants: the checks above must catch them ------------------------------------------------


class OverReporting(LimitedDomainTopk):
    """Charges one outcome more than returned: exceeds the reservation when all k keys were released."""

    def realized(self, result: Any) -> tuple[DpEvent, ...]:
        (e,) = super().realized(result)
        return (RangeBoundedEvent(e.epsilon, count=e.count + 1, delta=e.delta, mechanism=e.mechanism),)


class UnderReporting(LimitedDomainTopk):
    """Forgets to charge the ⊥ outcome."""

    def realized(self, result: Any) -> tuple[DpEvent, ...]:
        (e,) = super().realized(result)
        count = e.count - int(result.hit_bottom)
        return () if count == 0 else (RangeBoundedEvent(e.epsilon, count=count, delta=e.delta, mechanism=e.mechanism),)


class UnderReserving(LimitedDomainTopk):
    """Reserves k − 1 outcomes."""

    def privacy_map(self) -> tuple[DpEvent, ...]:
        (e,) = super().privacy_map()
        return (RangeBoundedEvent(e.epsilon, count=e.count - 1, delta=e.delta, mechanism=e.mechanism),)


def _topk_builder_with(measurement_type: type[LimitedDomainTopk]) -> Callable[[Config], TopkBuilder]:
    class Broken(TopkBuilder):
        @property
        def measurement(self) -> Any:
            t = self.cfg.releases.topk
            return measurement_type(k=t.k, k_bar=t.k_bar, epsilon=t.epsilon, delta=t.delta,
                                    max_keys_per_user=self.cfg.contribution.max_keys_per_user)

    return Broken


@pytest.mark.parametrize("broken", [OverReporting, UnderReporting, UnderReserving])
def test_the_contract_fails_on_a_broken_topk_measurement(broken: type[LimitedDomainTopk]) -> None:
    with pytest.raises(AssertionError):
        check_batch(CASES["topk"], _topk_builder_with(broken))


def test_the_contract_fails_on_an_svt_measurement_that_charges_every_window() -> None:
    class ChargesEveryWindow:
        def __init__(self, cfg: Any) -> None:
            self.inner = alerts_measurement(cfg)
            self.mechanism = self.inner.mechanism

        def open(self, rng: Any = None) -> Any:
            return self.inner.open(rng)

        def privacy_map(self) -> tuple[DpEvent, ...]:
            return self.inner.privacy_map()

        def realized(self, svt: Any) -> tuple[DpEvent, ...]:
            return self.inner.privacy_map() * 2  # double-charges an opening

    with pytest.raises(AssertionError):
        check_alerts(CASES["alerts"], ChargesEveryWindow)
