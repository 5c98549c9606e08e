"""Where streamplace finds what it ships (pom, broker config, topic definitions, cluster specs)
and where it keeps runtime state (broker data, logs, jars, pid files).

Shipped files are read with importlib.resources so an installed wheel works outside a checkout:
the repository's top-level ``kafka/`` folder is packaged as ``streamplace/_kafka`` (it is not a
Python package on purpose: a top-level ``kafka`` package would shadow kafka-python). In a source
checkout (editable install) the folder is read from the repository itself.

The cluster spec files, the checkout and the runtime home are found by
:mod:`workload.cluster_spec` (the placement service and the hook need them too and may not import
``streamplace``); they are re-exported here.

Example::

    >>> (kafka_assets() / "pom.xml").is_file()
    True
    >>> (cluster_spec_dir() / "default.yaml").is_file()
    True
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from workload.cluster_spec import checkout_root, cluster_spec_dir, default_home

__all__ = ["kafka_assets", "cluster_spec_dir", "checkout_root", "default_home"]


def kafka_assets() -> Path:
    """Folder holding ``pom.xml``, ``server.properties.template``, ``log4j2.properties`` and
    ``topics.yaml``."""
    shipped = resources.files("streamplace") / "_kafka"
    if shipped.is_dir():
        return Path(str(shipped))
    root = checkout_root()
    if root is not None:
        return root / "kafka"
    raise FileNotFoundError(
        "streamplace's Kafka assets are missing: neither streamplace/_kafka (wheel) nor "
        "kafka/ (checkout) was found; reinstall streamplace")
