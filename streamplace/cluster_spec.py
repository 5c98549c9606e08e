"""Re-export of :mod:`workload.cluster_spec`, kept so ``streamplace.cluster_spec`` imports work.

The cluster-spec model and loader live in ``workload`` (the bottom of the dependency chain) so
that the placement service and the hook can read specs without importing ``streamplace``; new
code imports them from there. Nothing is defined here.

Example::

    >>> from streamplace.cluster_spec import load_cluster_spec
    >>> [tm.id for tm in load_cluster_spec("default").taskmanagers]
    ['tm_a', 'tm_b', 'tm_c']
"""

from __future__ import annotations

from workload.cluster_spec import (JVM_FIXED_OVERHEAD_MB, JVM_METASPACE_MB, LocalClusterSpec,
                                   SpecError, TaskManagerSpec, load_cluster_spec)

__all__ = ["TaskManagerSpec", "LocalClusterSpec", "load_cluster_spec", "SpecError",
           "JVM_FIXED_OVERHEAD_MB", "JVM_METASPACE_MB"]
