"""Evaluation harness: utility of stream-dp's releases against the seed papers and against baselines.

One command regenerates the whole report (CSV + PNG + Markdown)::

    python -m eval.report --out docs/evaluation --scale full

``--scale tiny`` runs the same code on small synthetic data in well under a minute (what the test runs).
Modules: :mod:`eval.data` (MovieLens and synthetic Zipf, contribution bounding), :mod:`eval.baselines`
(full-domain Gumbel top-k, Laplace-threshold partition selection), :mod:`eval.calibration` (equal
privacy per window through the project's accountant), :mod:`eval.metrics`, :mod:`eval.topk` (experiment
1), :mod:`eval.continual` (experiment 2), :mod:`eval.seeds` (experiment 3), :mod:`eval.plots`,
:mod:`eval.report`.
"""
