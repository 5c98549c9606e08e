"""Discrete-event digital twin of a heterogeneous CPU-GPU cluster (imports only ``workload``)."""
