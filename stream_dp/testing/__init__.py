"""Test and audit helpers: reference oracles and empirical privacy audits (no I/O, numpy/scipy only)."""
