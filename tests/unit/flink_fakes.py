"""Stand-ins for what PyFlink hands a function (no JVM): the runtime context ``open`` gets,
which is also enough of the broadcast context ``process_element`` gets for the router."""

from __future__ import annotations


class FakeMetrics:
    """A metric group that accepts gauges and keeps nothing."""

    def gauge(self, name, fn):
        pass


class FakeContext:
    """Runtime context of subtask 0, and the router's broadcast context of a fresh job."""

    def get_index_of_this_subtask(self):
        return 0

    def get_metrics_group(self):
        return FakeMetrics()

    def get_broadcast_state(self, descriptor):
        return {}  # a fresh job: no node reports checkpointed


class RecordingMetrics:
    """A metric group that keeps its gauges, to read them back."""

    def __init__(self):
        self.gauges = {}

    def gauge(self, name, fn):
        self.gauges[name] = fn


class MetricsContext(FakeContext):
    """:class:`FakeContext` whose metric group keeps the gauges (``.metrics.gauges``)."""

    def __init__(self):
        self.metrics = RecordingMetrics()

    def get_metrics_group(self):
        return self.metrics
