"""Long-running processes of stream-dp, as thin wiring over the ``stream_dp`` library."""
