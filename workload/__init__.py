"""What flows through streamplace: tasks, stages, nodes, observations and the Avro contract.

Bottom of the dependency chain: nothing here imports ``simulator``, ``placement``,
``interference``, ``pyflink_jobs`` or ``streamplace``, and nothing here imports torch at module
import time (the codec sits on the router's hot path).
"""
