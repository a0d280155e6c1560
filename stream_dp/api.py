"""The release types as a library: one call per release, at a window budget (docs/library.md).

Each function takes what a data scientist has -- (user, key) rows as an iterable of pairs or a DataFrame-like
object with ``user`` and ``key`` columns, or precomputed bounded counts (``counts=``) -- and the *window budget*
(``epsilon``, ``delta``): the guarantee of this one release on its own (:mod:`stream_dp.release.window_budget`).
It then runs exactly what the release worker runs for one window:

1. **bounding** (docs/ingest.md): a user counts once per key and for at most ``max_keys_per_user`` keys, the first
   ones in row order (:class:`~stream_dp.ingest.bounding.ContributionBounder`); ``counts=`` must already be
   bounded so (distinct users per key, each user on at most ``max_keys_per_user`` keys) -- the guarantee assumes it;
2. **calibration** from (ε_w, δ_w) by :mod:`stream_dp.release.window_budget` (cached: repeated calls at the same
   budget do not recompute it);
3. **the mechanism** -- the measurement the worker reserves and settles in the ledger -- and **the record** the
   worker publishes (:mod:`stream_dp.release.drafts`): ``release_id``, ``window``, ``type``, ``status``,
   ``mechanism`` (name and parameters), ``items``, ``hit_bottom``, ``info``, ``cost`` (the DP events) and
   ``created_at``. There is no ledger here: ``budget`` states the window budget (``epsilon_cap``, ``delta_cap``)
   and what this release spent of it by the same rule (``epsilon_spent`` at ``delta_spent`` = δ_w). Keys come back
   as given (the releases topic carries them as strings).

``seed``: an int (numpy's seeded PCG64, for tests and simulations), a ``numpy.random.Generator``, or None -- the
production generator, ChaCha20 keyed from the OS (:mod:`stream_dp.rng`). Everything released is a DP function of
the rows; nothing else about them (the number of rows, users or keys) is published, except through the
mechanism's own output.

>>> rows = [(f"u{i}", "popular") for i in range(300)] + [("u1", "rare")]
>>> record = histogram(rows, epsilon=1.0, delta=1e-6, max_keys_per_user=1, seed=7)
>>> [item["key"] for item in record["items"]], record["type"], record["budget"]["epsilon_cap"]
(['popular'], 'histogram', 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from typing import Any

import numpy as np

from stream_dp.ingest.bounding import ContributionBounder
from stream_dp.mechanisms._validation import check_positive_int, tie_key
from stream_dp.release import drafts
from stream_dp.release import window_budget as wb
from stream_dp.release.records import RecordDraft
from stream_dp.release.windows import Window
from stream_dp.rng import RngLike, make_rng

Rows = Iterable[tuple[Hashable, Hashable]] | Any  # pairs, or a DataFrame-like object with named columns
Seed = RngLike


# ------------------------------------------------------------------------------------------------------------------
# Inputs
# ------------------------------------------------------------------------------------------------------------------


def _column(data: Any, name: str) -> list[Any]:
    try:
        column = data[name]
    except (KeyError, IndexError, TypeError, ValueError):
        raise ValueError(f"data has no column {name!r}; name the user and key columns with columns=(user, key)"
                         ) from None
    return column.tolist() if hasattr(column, "tolist") else list(column)


def _pairs(data: Rows, columns: tuple[str, str]) -> Iterable[tuple[Hashable, Hashable]]:
    """(user, key) pairs in row order from an iterable of pairs or a DataFrame-like object (named columns)."""
    if data is None:
        raise ValueError("give the rows (data=...) or the bounded counts (counts=...)")
    if isinstance(data, Mapping) or hasattr(data, "columns"):
        return zip(_column(data, columns[0]), _column(data, columns[1]))
    if isinstance(data, (str, bytes)):
        raise ValueError("data must be (user, key) pairs or a DataFrame-like object, got a string")
    return data


def bounded(data: Rows, *, max_keys_per_user: int, columns: tuple[str, str] = ("user", "key")
            ) -> ContributionBounder:
    """The rows bounded as ingest bounds one window: a user counts once per key and for at most
    ``max_keys_per_user`` keys, the first ones in row order. ``.counts``: distinct users per key; ``.pairs()``: the
    counted (user, key) pairs.

    >>> dict(bounded([("u", "a"), ("u", "a"), ("u", "b"), ("v", "b")], max_keys_per_user=1).counts)
    {'a': 1, 'b': 1}
    """
    bounder = ContributionBounder(check_positive_int(max_keys_per_user, "max_keys_per_user"))
    for row in _pairs(data, columns):
        try:
            user, key = row
        except (TypeError, ValueError):
            raise ValueError(f"every row must be a (user, key) pair, got a {type(row).__name__}") from None
        bounder.offer(user, key)
    return bounder


def _counts(data: Rows, counts: Mapping[Hashable, Any] | None, max_keys_per_user: int,
            columns: tuple[str, str]) -> Mapping[Hashable, Any]:
    if counts is not None:
        if data is not None:
            raise ValueError("give either the rows (data) or the bounded counts (counts=), not both")
        if not isinstance(counts, Mapping):
            raise ValueError(f"counts must be a mapping key -> bounded count, got {type(counts).__name__}")
        return counts
    return bounded(data, max_keys_per_user=max_keys_per_user, columns=columns).counts


def _window(window: tuple[int, int] | None) -> Window:
    if window is None:
        return Window(0, 0)
    start, end = window
    if not (isinstance(start, int) and isinstance(end, int) and start <= end):
        raise ValueError(f"window must be (start, end) epoch seconds with start <= end, got {window!r}")
    return Window(start, end)


def _record(draft: RecordDraft, epsilon: float, delta: float) -> dict[str, Any]:
    """The draft as the releases topic carries it, with the window budget in place of the ledger's block."""
    spent = wb.window_epsilon(draft.events, delta)
    record = draft.to_record()
    record["budget"] = {"scope": "window", "epsilon_spent": spent, "delta_spent": delta,
                        "epsilon_remaining": epsilon - spent, "delta_remaining": 0.0,
                        "epsilon_cap": epsilon, "delta_cap": delta}
    return record


def _same(key: Hashable) -> Hashable:
    return key


# ------------------------------------------------------------------------------------------------------------------
# One call per release type
# ------------------------------------------------------------------------------------------------------------------


def histogram(data: Rows = None, *, counts: Mapping[Hashable, Any] | None = None, epsilon: float, delta: float,
              max_keys_per_user: int, noise: str = "gaussian", calibration: str = "zcdp",
              weighting: str = "uniform", domain: Collection[Hashable] | None = None, max_keys: int = 1000,
              confidence: float = 0.95, seed: Seed = None, window: tuple[int, int] | None = None,
              columns: tuple[str, str] = ("user", "key")) -> dict[str, Any]:
    """The ``histogram`` release at window budget (ε, δ): every key whose noisy count clears the threshold (and
    every key of the public ``domain``), with its noisy count and an interval at ``confidence``; at most
    ``max_keys`` keys. ``noise``: ``gaussian`` (discrete Gaussian, zCDP) or ``laplace`` (discrete Laplace, pure ε:
    better for small Δ); ``calibration``: ``zcdp`` or ``exact`` (the thresholded Gaussian's exact privacy profile,
    docs/privacy.md §8c); ``weighting``: ``uniform`` or ``per_user`` (§8d: needs the rows, not counts).

    >>> r = histogram(counts={"a": 500, "b": 1}, epsilon=1.0, delta=1e-6, max_keys_per_user=1, seed=1)
    >>> [item["key"] for item in r["items"]], r["mechanism"]["parameters"]["threshold"]
    (['a'], 25)
    """
    epsilon, delta = wb.check_window_budget(epsilon, delta)
    dk = check_positive_int(max_keys_per_user, "max_keys_per_user")
    cal = wb.histogram_calibration(epsilon, delta, dk, noise=noise, calibration=calibration, weighting=weighting)
    if weighting == "per_user":
        if counts is not None:
            raise ValueError('weighting="per_user" weighs each user by her number of keys: give the rows (data), '
                             "not counts")
        from stream_dp.mechanisms.weighted_histogram import weighted_scores

        values: Mapping[Hashable, Any] = weighted_scores(
            bounded(data, max_keys_per_user=dk, columns=columns).pairs(), max_keys_per_user=dk)
    else:
        values = _counts(data, counts, dk, columns)
    measurement = drafts.histogram_measurement(cal, noise=noise, weighting=weighting, max_keys=max_keys,
                                               confidence=confidence)
    public = tuple(dict.fromkeys(domain)) if domain is not None else ()
    result = measurement(values, rng=make_rng(seed), domain=public)
    mechanism = ("weighted_histogram" if weighting == "per_user" else "laplace_histogram" if noise == "laplace"
                 else "gaussian_histogram")
    parameters = {"window_epsilon": epsilon, "window_delta": delta,
                  **drafts.histogram_parameters(cal, noise=noise, weighting=weighting, max_keys=max_keys,
                                                confidence=confidence, max_keys_per_user=dk),
                  "domain_size": len(public)}
    draft = drafts.histogram_draft(_window(window), mechanism, parameters, result, measurement,
                                   has_domain=bool(public), confidence=confidence, key=_same)
    return _record(draft, epsilon, delta)


def topk(data: Rows = None, *, counts: Mapping[Hashable, Any] | None = None, epsilon: float, delta: float,
         max_keys_per_user: int, k: int = 10, k_bar: int | None = None, domain: Collection[Hashable] | None = None,
         discovery: str = "threshold", discovery_share: float = 0.8, seed: Seed = None,
         window: tuple[int, int] | None = None, columns: tuple[str, str] = ("user", "key")) -> dict[str, Any]:
    """The ``topk`` release at window budget (ε, δ): up to ``k`` keys, best first.

    Without a ``domain``: limited-domain top-k (Durfee & Rogers 2019) over the top ``k_bar`` + 1 counts (default
    k̄ = 10·k, the service's default ratio); it may stop early at ⊥ (``hit_bottom``) and is charged for the
    outcomes it returned. With a public ``domain`` (a catalogue): full-domain Gumbel top-k over it, plus discovery
    of keys outside it with ``discovery_share`` of ρ (0: the domain holds every key that can occur) -- ``discovery``
    ``threshold`` (the service's default: a thresholded discrete-Gaussian histogram of the keys outside the domain)
    or ``limited_domain`` (limited-domain top-k over them). Either way k outcomes fit the window budget (the worst
    case the ledger reserves).

    >>> r = topk(counts={"a": 900, "b": 800, "c": 3}, epsilon=1.0, delta=1e-6, max_keys_per_user=1, k=2, seed=7)
    >>> [item["key"] for item in r["items"]], r["hit_bottom"]
    (['a', 'b'], False)
    """
    from stream_dp.mechanisms import LimitedDomainTopk

    epsilon, delta = wb.check_window_budget(epsilon, delta)
    dk = check_positive_int(max_keys_per_user, "max_keys_per_user")
    k = check_positive_int(k, "k")
    k_bar = check_positive_int(10 * k if k_bar is None else k_bar, "k_bar")
    values = _counts(data, counts, dk, columns)
    common = {"k": k, "k_bar": k_bar, "window_epsilon": epsilon, "window_delta": delta, "max_keys_per_user": dk}
    if domain is None:
        p = wb.topk_parameters(epsilon, delta, k)
        measurement = LimitedDomainTopk(k=k, k_bar=k_bar, epsilon=p.epsilon, delta=p.delta, max_keys_per_user=dk)
        result = measurement(values, rng=make_rng(seed))
        draft = drafts.topk_draft(_window(window), {**common, "epsilon": p.epsilon, "delta": p.delta}, result,
                                  measurement, key=_same)
        return _record(draft, epsilon, delta)
    q = wb.known_domain_parameters(epsilon, delta, k, discovery_share, discovery=discovery, max_keys_per_user=dk)
    public = list(dict.fromkeys(domain))
    members = set(public)
    known = q.measurement(k=k, k_bar=k_bar, max_keys_per_user=dk)
    found = known({key: values.get(key, 0) for key in public},
                  {key: c for key, c in values.items() if key not in members}, rng=make_rng(seed))
    parameters = {**common, **drafts.known_domain_parameters(q, discovery_share=discovery_share)}
    draft = drafts.known_domain_draft(_window(window), parameters, found, known, domain_size=len(public), key=_same)
    return _record(draft, epsilon, delta)


def sample(data: Rows = None, *, counts: Mapping[Hashable, Any] | None = None, epsilon: float, delta: float,
           max_keys_per_user: int, scheme: str = "pps", tau: float | None = 0.01, seed: Seed = None,
           window: tuple[int, int] | None = None, columns: tuple[str, str] = ("user", "key")) -> dict[str, Any]:
    """The ``sample`` release at window budget (ε, δ): private weighted sampling (Cohen et al. 2021, the late
    Algorithm 4) -- sampled keys with sanitized frequency tokens and estimates whose sum estimates the total
    count. ``scheme``: ``pps`` (priority), ``ppswor`` or ``none``; ``tau``: the sampling threshold.

    >>> r = sample(counts={f"k{i}": 50 for i in range(20)}, epsilon=1.0, delta=1e-6, max_keys_per_user=1, seed=3)
    >>> r["type"], r["info"]["sampled"] == len(r["items"])
    ('sample', True)
    """
    from stream_dp.mechanisms import PrivateWeightedSample
    from stream_dp.release.sampling import count_classes, sample_count_classes

    epsilon, delta = wb.check_window_budget(epsilon, delta)
    dk = check_positive_int(max_keys_per_user, "max_keys_per_user")
    values = _counts(data, counts, dk, columns)
    classes, members_at = _in_memory_window(values)
    parameters = {"scheme": scheme, "tau": tau, "epsilon": epsilon, "delta": delta, "max_keys_per_user": dk}
    result = sample_count_classes(count_classes(classes), members_at, scheme=scheme, tau=tau, epsilon=epsilon,
                                  delta=delta, max_keys_per_user=dk, rng=make_rng(seed))
    measurement = PrivateWeightedSample(scheme=scheme, tau=tau, epsilon=epsilon, delta=delta, max_keys_per_user=dk)
    draft = drafts.sample_draft(_window(window), parameters, result, measurement, key=_same)
    return _record(draft, epsilon, delta)


def _in_memory_window(counts: Mapping[Hashable, Any]
                      ) -> tuple[list[tuple[float, int]], Callable[[np.ndarray, np.ndarray], list[Hashable]]]:
    """The window's count histogram and its ``members_at`` as the worker's reader gives them from Redis: keys in
    ascending (count, key) order, the classes of equal counts ascending (the keys with count 0 are absent)."""
    from stream_dp.mechanisms.gaussian_histogram import _check_counts

    keys, values = _check_counts(counts)
    present = np.flatnonzero(values > 0)
    order = sorted(present.tolist(), key=lambda i: (int(values[i]), tie_key(keys[i])))
    ranked_keys = [keys[i] for i in order]
    ranked_counts = values[order] if order else np.zeros(0, dtype=np.int64)
    distinct, sizes = np.unique(ranked_counts, return_counts=True)

    def members_at(ranks: np.ndarray, wanted: np.ndarray) -> list[Hashable]:
        at = np.asarray(ranks, dtype=np.int64)
        if len(at) and (at.max() >= len(ranked_keys) or np.any(ranked_counts[at] != np.asarray(wanted))):
            raise RuntimeError("a sampled rank holds another count")  # pragma: no cover - counts are fixed here
        return [ranked_keys[i] for i in at.tolist()]

    return [(float(v), int(n)) for v, n in zip(distinct.tolist(), sizes.tolist())], members_at


# ------------------------------------------------------------------------------------------------------------------
# Which release type
# ------------------------------------------------------------------------------------------------------------------

#: evaluation method (stream_dp.release.release_choice) -> (function of this module, its keyword arguments)
CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "sdp_histogram": ("histogram", {}),
    "sdp_histogram_laplace": ("histogram", {"noise": "laplace"}),
    "sdp_histogram_exact": ("histogram", {"calibration": "exact"}),
    "sdp_histogram_domain": ("histogram", {"domain": "<the public keys>"}),
    "sdp_histogram_laplace_domain": ("histogram", {"noise": "laplace", "domain": "<the public keys>"}),
    "sdp_histogram_exact_domain": ("histogram", {"calibration": "exact", "domain": "<the public keys>"}),
    "sdp_histogram_exact_partial": ("histogram", {"calibration": "exact", "domain": "<the public keys>"}),
    "sdp_histogram_laplace_partial": ("histogram", {"noise": "laplace", "domain": "<the public keys>"}),
    "sdp_ldt": ("topk", {}),
    "sdp_known_domain": ("topk", {"domain": "<the public keys>", "discovery_share": 0.0}),
    "sdp_known_domain_partial": ("topk", {"domain": "<the public keys>", "discovery": "limited_domain",
                                          "discovery_share": 0.2}),
}


def plan(data: Rows = None, *, epsilon: float, max_keys_per_user: int, k: int = 10,
         expected_users: float | None = None, domain: str = "none",
         columns: tuple[str, str] = ("user", "key")) -> dict[str, Any]:
    """Which release type for this data and budget: the best stream-dp type of the nearest evaluated cell of the
    release-choice table (docs/evaluation, experiment 4; :func:`stream_dp.release.release_choice.recommend`), and
    the call of this module that runs it (``call``, ``arguments``). ``expected_users``: users per window (default:
    the distinct users of ``data``); ``domain``: ``none``, ``complete`` (a public catalogue of every key) or
    ``partial`` (some keys public). Advice only: computed from public numbers and the number of users, which it
    reads from the data -- treat ``expected_users`` as public (use a public estimate when it is not).

    >>> p = plan(epsilon=1.0, max_keys_per_user=5, k=10, expected_users=600, domain="complete")
    >>> p["call"], p["cell"]["delta_keys"]
    ('histogram', 5)
    """
    from stream_dp.release.release_choice import recommend

    if domain not in ("none", "complete", "partial"):
        raise ValueError(f"domain must be one of none, complete, partial, got {domain!r}")
    if expected_users is None:
        if data is None:
            raise ValueError("give expected_users (users per window) or the rows (data) to count them")
        expected_users = float(len({user for user, _ in _pairs(data, columns)}))
    if not (isinstance(expected_users, (int, float)) and math.isfinite(expected_users) and expected_users > 0):
        raise ValueError(f"expected_users must be a number > 0, got {expected_users!r}")
    choice = recommend(max_keys_per_user=max_keys_per_user, k=k, epsilon_w=epsilon, known_domain=domain != "none",
                       expected_users=expected_users, complete_domain=domain == "complete")
    call, arguments = CALLS[choice.method]
    return {**choice.to_dict(), "call": call, "arguments": arguments}
