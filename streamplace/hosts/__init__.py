"""Emulated hosts: each TaskManager in its own network namespace, with its own address on a
bridge, a link shaped with ``tc`` to its uplink/downlink bandwidth, a CPU quota and a memory
limit (cgroup v1); the JobManager, broker and placement service stay on the head host. Without
root, namespaces or cgroup v1 the launcher keeps CPU-set mode (:func:`select_mode` says which
and why). See ``docs/hosts.md``.

Example::

    >>> from streamplace.hosts import HostSpec, HostNames
    >>> HostNames("sp").namespace(HostSpec(node_id="tm_a", address_index=2, uplink_mbps=40,
    ...     downlink_mbps=120, cpu_quota=0.5, memory_mb=256).node_id)
    'sp-tm_a'
"""

from streamplace.hosts.cleanup import DESTROY_GRACE_S, HostsCleanup
from streamplace.hosts.emulated import ENTER_SCRIPT, NETNS_RUN_DIR, EmulatedHosts
from streamplace.hosts.spec import (CPU_PERIOD_US, IFNAMSIZ_MAX, TBF_BURST_SECONDS,
                                    TBF_LATENCY_MS, TBF_MIN_BURST_BYTES, HostHandle, HostNames,
                                    HostsError, HostSpec, tbf_arguments)
from streamplace.hosts.state import HostsState
from streamplace.hosts.system import (MODE_CPU_SET, MODE_EMULATED, CgroupFiles, HostSystem,
                                      available, run_command, select_mode)
from streamplace.hosts.telemetry import HostRates, HostSample, HostTelemetry, rates

__all__ = ["HostSpec", "HostNames", "HostHandle", "HostsError", "EmulatedHosts", "HostsState",
           "HostsCleanup", "HostSystem", "CgroupFiles", "HostTelemetry", "HostSample",
           "HostRates", "rates", "available", "select_mode", "run_command", "tbf_arguments",
           "MODE_EMULATED", "MODE_CPU_SET", "CPU_PERIOD_US", "IFNAMSIZ_MAX",
           "TBF_BURST_SECONDS", "TBF_MIN_BURST_BYTES", "TBF_LATENCY_MS", "DESTROY_GRACE_S",
           "NETNS_RUN_DIR", "ENTER_SCRIPT"]
