"""LDWP and every cluster-level placement policy; the placement service and its client."""
