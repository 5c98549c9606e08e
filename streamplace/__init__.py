"""streamplace: learned, interference-aware placement for PyFlink + Kafka stream processing.

The CLI (``streamplace ...``), the composed configuration and the runtime tooling (local Kafka
broker and Flink cluster launchers) live here, at the top of the dependency chain.
"""

__version__ = "0.1.0"
