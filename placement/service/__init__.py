"""The placement service (``streamplace serve``): learns LDWP online from the feedback topic,
publishes model versions, and serves decisions and the slot-level plan over HTTP.

Submodules (imported lazily, so ``from placement.service.client import PlacementClient`` in a
Flink Python worker pulls in neither FastAPI nor torch):

- ``settings``: :class:`ServiceSettings` (pydantic only)
- ``app``: :class:`PlacementService`, ``create_app``, :func:`plan_executors`
- ``feedback``: Kafka consumer, de-duplication
- ``learner``: :class:`OnlineLearner`
- ``store``: :class:`ModelStore`
- ``client``: :class:`PlacementClient` (standard library only)
- ``flink_rest``: :class:`FlinkRestClient`
- ``metrics``: Prometheus metrics

Example::

    from placement.service import PlacementService, ServiceSettings, PlacementClient
    with PlacementService(ServiceSettings(port=0)) as service:
        print(PlacementClient(service.url).health()["status"])
"""

from __future__ import annotations

import importlib

__all__ = ["ServiceSettings", "PlacementService", "create_app", "plan_executors",
           "OnlineLearner", "ModelStore", "PlacementClient", "ServiceUnavailable",
           "FlinkRestClient", "FlinkUnreachable", "FeedbackConsumer", "ServiceMetrics"]

_WHERE = {"ServiceSettings": "settings", "PlacementService": "app", "create_app": "app",
          "plan_executors": "app", "OnlineLearner": "learner", "ModelStore": "store",
          "PlacementClient": "client", "ServiceUnavailable": "client",
          "FlinkRestClient": "flink_rest", "FlinkUnreachable": "flink_rest",
          "FeedbackConsumer": "feedback", "ServiceMetrics": "metrics"}


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
