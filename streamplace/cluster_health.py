"""Bring a standalone Flink cluster back to all of its TaskManagers, and make sure it stays so.

Usage::

    from streamplace.cluster_health import heal_cluster
    cluster.cancel_job(job_id)
    heal_cluster(cluster)          # every TaskManager up, and still up 5 s later
    cluster.submit_python_job(...)
"""

from __future__ import annotations

import time

from streamplace.flink_cluster import FlinkCluster
from streamplace.processes import LaunchError

__all__ = ["heal_cluster"]


def heal_cluster(cluster: FlinkCluster, settle_s: float = 5.0, attempts: int = 4) -> None:
    """Bring the cluster back to all its TaskManagers and make sure it stays whole a while.

    PyFlink 2.2.1 sometimes kills a TaskManager while a job is being cancelled ("Reference
    count must not be negative"), seconds after the cancel returned. A test that needs a given
    node (or kills one on purpose) must not start while another is still dying: start whatever
    is gone (``FlinkCluster.start`` starts only what is not running and waits until every
    TaskManager registered), then watch for ``settle_s`` that every TaskManager process stays
    alive and registered; repeat if one died meanwhile.
    """
    for attempt in range(1, attempts + 1):
        try:
            cluster.start()
        except LaunchError:  # a TaskManager was still dying when start() looked
            if attempt == attempts:
                raise
            time.sleep(settle_s)
            continue
        deadline = time.monotonic() + settle_s
        whole = True
        while whole and time.monotonic() < deadline:
            time.sleep(0.5)
            whole = all(tm.running for tm in cluster.status().taskmanagers)
        if whole and all(tm.registered for tm in cluster.status().taskmanagers):
            return
    raise LaunchError(f"the Flink cluster did not stay whole for {settle_s:.0f} s in "
                      f"{attempts} tries: {cluster.status()}")
