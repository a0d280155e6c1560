"""The tests' Redis Cluster fixtures: a real 3-master (+ replicas) cluster of redis-server processes.

The cluster runner itself lives in :mod:`stream_dp.devcluster` (the benchmarks start the same clusters);
this module is the tests' entry point to it.
"""

from __future__ import annotations

from stream_dp.devcluster import LocalCluster, Node, cluster_port, local_cluster, wait_until

__all__ = ["LocalCluster", "Node", "cluster_port", "local_cluster", "wait_until"]
