"""Budget planning from the config alone: how many worst-case windows fit a budget period and the lifetime cap.

Every window gets every enabled release type (a public release schedule: even an empty window is charged),
so a window's worst-case cost is the sum over the enabled types of the events each reserves before it runs
(top-k at k outcomes, sampling, argmax, watch_topk), plus, for ``alerts``, an SVT instance opening
(its whole ε, docs/privacy.md §4). In the worst case an instance opens in every window (a growing
watchlist exhausts each instance at once); ``releases.alerts.max_instances_per_period`` bounds that.

``windows_fitting(cap)`` is the largest n for which n windows of one period (with min(n, instance limit)
instances) compose -- by the ledger's own rule (:func:`stream_dp.accounting.budget.decide`) -- within
the cap. Workers refuse to start when fewer windows fit a period than the period holds
(:func:`require_full_period`), unless ``budget.allow_partial_period`` says the operator accepts that the
last windows of each period will be published as ``budget_exhausted``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from stream_dp.accounting.budget import BudgetCap, decide, reported_delta, reported_epsilon
from stream_dp.accounting.composition import compose
from stream_dp.accounting.events import DpEvent
from stream_dp.config import Config, ConfigError
from stream_dp.release.types import REGISTRY, release_measurements

_SEARCH_LIMIT = 1_000_000  # windows; a plan that fits more than this is reported as "≥ limit"


@dataclass(frozen=True)
class BudgetPlan:
    """The worst-case cost of a window and how many windows the caps hold (all from the config)."""

    window_seconds: int
    period_seconds: int
    per_window: dict[str, tuple[DpEvent, ...]]  # batch types: their events every window
    alerts_instance: tuple[DpEvent, ...] = ()  # one SVT instance opening (empty: alerts off)
    alerts_max_instances: int = 0  # per period; 0 = no limit (worst case: one per window)
    period_cap: BudgetCap | None = None
    lifetime_cap: BudgetCap | None = None
    allow_partial_period: bool = False
    notes: list[str] = field(default_factory=list)
    # inputs of the release-type recommendation (stream_dp.release.release_choice); None: no heavy-hitter type
    choice: dict[str, Any] | None = None

    @property
    def windows_per_period(self) -> int:
        """Windows whose start lies in one period (each is charged to the period it starts in)."""
        return math.ceil(self.period_seconds / self.window_seconds)

    def instances(self, windows: int, periods: int = 1) -> int:
        """Worst-case SVT instances opened by ``windows`` windows spread over ``periods`` periods."""
        if not self.alerts_instance:
            return 0
        if self.alerts_max_instances <= 0:
            return windows
        return min(windows, self.alerts_max_instances * periods)

    def events(self, windows: int, periods: int = 1) -> list[DpEvent]:
        """The worst-case events of ``windows`` windows (spread over ``periods`` periods)."""
        out: list[DpEvent] = []
        for events in self.per_window.values():
            out += [e for e in events for _ in range(windows)]
        out += [e for e in self.alerts_instance for _ in range(self.instances(windows, periods))]
        return out

    def window_events(self) -> list[DpEvent]:
        """One worst-case window, an instance opening included (the most one window can cost)."""
        return self.events(1)

    def windows_fitting(self, cap: BudgetCap, *, lifetime: bool = False, at_most: int | None = None) -> int:
        """Largest n such that n worst-case windows fit ``cap`` (monotone in n: binary search).

        ``at_most``: the largest n of interest, exact below it (a start check only asks whether a period's
        windows fit). Without it the search stops at ``_SEARCH_LIMIT`` windows ("at least the limit"). Each
        candidate n composes n windows' events one by one, so an unbounded search under a generous cap
        (budget.epsilon = 10⁶) cost a worker about a minute of CPU at every start."""
        def fits(n: int) -> bool:
            periods = max(1, math.ceil(n / self.windows_per_period)) if lifetime else 1
            return decide(compose(self.events(n, periods)), cap) == "ok"

        limit = _SEARCH_LIMIT if at_most is None else at_most
        if limit < 1 or not fits(1):
            return 0
        lo, hi = 1, 2
        while hi <= limit and fits(hi):
            lo, hi = hi, hi * 2
        if hi > limit:
            if at_most is None:
                return _SEARCH_LIMIT
            hi = limit + 1  # lo fits, limit + 1 is not of interest: the answer is in [lo, limit]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return lo

    def recommendation(self, expected_users: float | None = None, epsilon_w: float | None = None
                       ) -> dict[str, Any] | None:
        """The release type the evaluation favours for this config (:func:`release_choice.recommend`): Δ and k
        from the config, whether a public domain is configured, ``epsilon_w`` (default: the ε one window's
        heavy-hitter release costs) and ``expected_users`` per window (default: no recommendation, because the
        evaluated cells differ most by the number of users)."""
        from stream_dp.release.release_choice import continual_advice, recommend

        if self.choice is None or expected_users is None:
            return None
        assert self.period_cap is not None
        eps = epsilon_w if epsilon_w is not None else self.choice["epsilon_w"]
        rec = recommend(max_keys_per_user=self.choice["max_keys_per_user"], k=self.choice["k"], epsilon_w=eps,
                        known_domain=self.choice["known_domain"], complete_domain=self.choice["complete_domain"],
                        expected_users=expected_users)
        continual = continual_advice(expected_users=expected_users, epsilon_w=eps)
        return {"inputs": {**self.choice, "epsilon_w": eps, "expected_users": expected_users}, **rec.to_dict(),
                "continual": continual.to_dict() if continual is not None else None}

    def summary(self, *, expected_users: float | None = None, epsilon_w: float | None = None) -> dict[str, Any]:
        """Everything ``stream-dp budget plan`` prints, as JSON-ready data."""
        assert self.period_cap is not None
        dp = self.period_cap.delta_prime
        types = {}
        for name, events in {**self.per_window, **({"alerts (instance opening)": self.alerts_instance}
                                                   if self.alerts_instance else {})}.items():
            spent = compose(events)
            types[name] = {"rho": spent.rho, "basic_epsilon": spent.basic_epsilon, "delta": spent.basic_delta}
        window = compose(self.window_events())
        per_period = self.windows_per_period
        fit = self.windows_fitting(self.period_cap)
        full = compose(self.events(min(fit, per_period))) if fit else None
        out: dict[str, Any] = {
            "window_seconds": self.window_seconds, "period_seconds": self.period_seconds,
            "windows_per_period": per_period,
            "alerts_max_instances_per_period": (self.alerts_max_instances or None) if self.alerts_instance else None,
            "per_type": types,
            "window_worst_case": {"rho": window.rho, "basic_epsilon": window.basic_epsilon,
                                  "delta": window.basic_delta,
                                  "epsilon": reported_epsilon(window, dp), "delta_total": reported_delta(window, dp)},
            "period_cap": self.period_cap.to_dict(),
            "windows_fitting_period": fit,
            "period_covered": fit >= per_period,
            "period_spent_worst_case": None if full is None else {
                "windows": min(fit, per_period), "epsilon": reported_epsilon(full, dp),
                "delta": reported_delta(full, dp)},
            "allow_partial_period": self.allow_partial_period,
            "notes": list(self.notes),
            "recommendation": self.recommendation(expected_users, epsilon_w),
        }
        if self.lifetime_cap is not None:
            life = self.windows_fitting(self.lifetime_cap, lifetime=True)
            out["lifetime_cap"] = self.lifetime_cap.to_dict()
            out["windows_fitting_lifetime"] = life
            out["lifetime_periods"] = life / per_period
        return out


def plan_for(cfg: Config) -> BudgetPlan:
    """The plan of ``cfg``: the privacy maps of the release types' measurements, i.e. the same worst-case
    events the release worker reserves."""
    maps = {t: m.privacy_map() for t, m in release_measurements(cfg).items()}
    per_window = {t: events for t, events in maps.items() if REGISTRY[t].charge == "window"}
    alerts = next((events for t, events in maps.items() if REGISTRY[t].charge == "instance"), ())
    notes = [note for t in per_window if (note := REGISTRY[t].plan_note) is not None]
    if alerts and not cfg.releases.alerts.max_instances_per_period:
        notes.append("alerts: no releases.alerts.max_instances_per_period, so the worst case opens an SVT "
                     "instance in every window")
    return BudgetPlan(cfg.windows.size_seconds, cfg.budget.period_seconds, per_window, alerts,
                      cfg.releases.alerts.max_instances_per_period, BudgetCap.from_config(cfg.budget),
                      BudgetCap.lifetime_from_config(cfg.budget), cfg.budget.allow_partial_period, notes,
                      _choice_inputs(cfg, per_window))


def _choice_inputs(cfg: Config, per_window: dict[str, tuple[DpEvent, ...]]) -> dict[str, Any] | None:
    """Δ, k, domain and the heavy-hitter release's ε per window (the larger of topk's and histogram's worst
    case, by the ledger's conversion) -- the inputs of :meth:`BudgetPlan.recommendation`. The domain counts as
    complete only when the config says so: a topk domain with ``discovery_share = 0`` (no key outside it is
    looked for); any other domain (the histogram always thresholds keys outside its domain) as partial."""
    heavy = [t for t in per_window if REGISTRY[t].heavy_hitter]
    if not heavy:
        return None
    dp = cfg.budget.delta_prime
    r = cfg.releases
    return {"max_keys_per_user": cfg.contribution.max_keys_per_user, "k": r.topk.k,
            "known_domain": bool(r.topk.has_domain or r.histogram.domain or r.histogram.domain_file),
            "complete_domain": bool(r.topk.has_domain and r.topk.discovery_share == 0),
            "epsilon_w": max(reported_epsilon(compose(per_window[t]), dp) for t in heavy)}


def require_full_period(cfg: Config) -> BudgetPlan:
    """Refuse (ConfigError naming the settings) when fewer worst-case windows fit a budget period than the
    period holds, unless ``budget.allow_partial_period`` is true. Returns the plan."""
    plan = plan_for(cfg)
    assert plan.period_cap is not None
    fit = plan.windows_fitting(plan.period_cap, at_most=plan.windows_per_period)
    if fit < plan.windows_per_period and not cfg.budget.allow_partial_period:
        raise ConfigError(
            f"budget.epsilon/budget.delta: only {fit} worst-case window(s) of {cfg.windows.size_seconds} s fit a "
            f"budget period of {cfg.budget.period_seconds} s, which holds {plan.windows_per_period}; the rest of "
            "each period would be published as budget_exhausted. Lower the release types' epsilon, bound "
            "releases.alerts.max_instances_per_period, raise the cap, or set budget.allow_partial_period = true "
            "(see: stream-dp budget plan)")
    return plan


def render(summary: dict[str, Any]) -> str:
    """The human-readable plan."""
    from stream_dp.tables import render as render_table, table  # only the CLI draws it: workers skip rich

    lines = [f"windows: {summary['window_seconds']} s; budget period: {summary['period_seconds']} s "
             f"= {summary['windows_per_period']} window(s)"]
    cap = summary["period_cap"]
    lines.append(f"period cap: ε = {cap['epsilon']:g}, δ = {cap['delta']:g} (δ′ = {cap['delta_prime']:g})")
    lines.append("")
    w = summary["window_worst_case"]
    rows = [(name, f"{t['rho']:.5f}", f"{t['basic_epsilon']:.4g}", f"{t['delta']:.3g}", "")
            for name, t in summary["per_type"].items()]
    rows.append(("one window (all types)", f"{w['rho']:.5f}", f"{w['basic_epsilon']:.4g}", f"{w['delta']:.3g}",
                 f"ε = {w['epsilon']:.4g}, δ = {w['delta_total']:.3g}"))
    lines.append(render_table(table(("worst case per window", "ρ (zCDP)", "Σε", "Σδ", "converted"), rows,
                              numeric=("ρ (zCDP)", "Σε", "Σδ"))))
    limit = summary["alerts_max_instances_per_period"]
    if "alerts (instance opening)" in summary["per_type"]:
        lines.append(f"alerts instances per period: {'at most ' + str(limit) if limit else 'one per window (no limit)'}")
    lines.append("")
    fit, per = summary["windows_fitting_period"], summary["windows_per_period"]
    verdict = "OK: every window of a period fits" if fit >= per else (
        f"SHORT: {per - fit} window(s) of each period would get budget_exhausted"
        + (" (allowed by budget.allow_partial_period)" if summary["allow_partial_period"] else
           "; the workers refuse to start"))
    lines.append(f"windows fitting one period: {fit} of {per} -- {verdict}")
    spent = summary["period_spent_worst_case"]
    if spent:
        lines.append(f"worst-case spend of {spent['windows']} window(s): ε = {spent['epsilon']:.4g} of "
                     f"{cap['epsilon']:g}, δ = {spent['delta']:.3g} of {cap['delta']:g}")
    if "windows_fitting_lifetime" in summary:
        life = summary["lifetime_cap"]
        lines.append(f"lifetime cap ε = {life['epsilon']:g}, δ = {life['delta']:g}: "
                     f"{summary['windows_fitting_lifetime']} window(s) = {summary['lifetime_periods']:.2f} period(s)")
    else:
        lines.append("lifetime cap: off (budget.lifetime_epsilon = 0)")
    for note in summary["notes"]:
        lines.append(f"note: {note}")
    rec = summary.get("recommendation")
    if rec:
        i, c = rec["inputs"], rec["cell"]
        peer = (f"; best peer there: {rec['best_peer']} {rec['best_peer_recall']:.2f}" if rec["best_peer"] else "")
        lines += ["", f"release type for Δ = {i['max_keys_per_user']}, k = {i['k']}, ε_w = {i['epsilon_w']:.3g}, "
                  f"~{i['expected_users']:g} users per window, {_domain_words(i)}: "
                  f"{rec['release_type']} ({rec['configure']})",
                  f"  from the evaluation's nearest cell ({c['dataset']}: {c['users']} users, Δ = {c['delta_keys']}, "
                  f"ε_w = {c['epsilon_w']:g}, k = {c['k']}): recall@{c['k']} {rec['recall']:.2f}{peer} "
                  "(docs/evaluation; README \"Choosing a release type\")"]
        lines += _continual_lines(rec.get("continual"))
    return "\n".join(lines)


def _continual_lines(advice: dict[str, Any] | None) -> list[str]:
    """The planner's released-domain advice (docs/evaluation, experiment 2b), when the evaluation has it."""
    if not advice:
        return []
    c = advice["cell"]
    where = f"the continual cell nearest ({c['cell']}: ~{c['users']} users per window, ε_w = {c['epsilon_w']:g})"
    if advice["turn_on"]:
        return [f"continual: set releases.histogram.domain_from_released = true (the default) -- in {where} a released "
                f"domain reaches recall {advice['released']:.2f} against {advice['single']:.2f} for the best single "
                "window (docs/privacy.md §10: it costs nothing)"]
    return [f"continual: a released domain (releases.histogram.domain_from_released) gained nothing beyond the "
            f"intervals in {where}: {advice['released']:.2f} against {advice['single']:.2f} for the best single window"]


def _domain_words(inputs: dict[str, Any]) -> str:
    if not inputs["known_domain"]:
        return "no public domain"
    if inputs["complete_domain"]:
        return "a complete public domain (topk discovery_share = 0)"
    return "a partial public domain (keys outside it are discovered)"
