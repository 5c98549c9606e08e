"""Where streamplace finds what it ships (pom, broker config, topic definitions, cluster specs)
and where it keeps runtime state (broker data, logs, jars, pid files).

Shipped files are read with importlib.resources so an installed wheel works outside a checkout:
the repository's top-level ``kafka/`` folder is packaged as ``streamplace/_kafka`` (it is not a
Python package on purpose: a top-level ``kafka`` package would shadow kafka-python). In a source
checkout (editable install) the folder is read from the repository itself.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

__all__ = ["kafka_assets", "cluster_spec_dir", "checkout_root", "default_home"]

_PACKAGE_DIR = Path(__file__).resolve().parent


def checkout_root() -> Path | None:
    """The source checkout this package runs from, or None for an installed wheel."""
    root = _PACKAGE_DIR.parent
    if (root / "pyproject.toml").is_file() and (root / "kafka" / "pom.xml").is_file():
        return root
    return None


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


def cluster_spec_dir() -> Path:
    """Folder of the shipped cluster spec files (``default.yaml`` and examples)."""
    return Path(str(resources.files("streamplace") / "specs"))


def default_home() -> Path:
    """Runtime folder: ``$STREAMPLACE_HOME``, else ``<checkout>/.streamplace`` (git-ignored),
    else ``~/.streamplace`` for an installed wheel."""
    env = os.environ.get("STREAMPLACE_HOME")
    if env:
        return Path(env).expanduser().resolve()
    root = checkout_root()
    if root is not None:
        return root / ".streamplace"
    return Path.home() / ".streamplace"
