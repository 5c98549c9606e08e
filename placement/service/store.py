"""Model versions on disk: ``v000001.spmodel`` files plus a JSON index, written atomically.

Each version is one LDWP model file in the pickle-free format of :mod:`placement.ldwp.modelfile`
(weights + metadata, SHA-256 checked on load). The index (``index.json``) keeps each version's
metadata as the HTTP API serves it: version, created_at, trained_on_records, training_data_hash,
sha256 (of the whole file, also the ETag of ``/models/{version}/weights``), size_bytes, ...

Why this layout:

- Atomic writes: a file is written to a temporary name in the same folder, flushed, fsynced and
  moved into place with ``os.replace``, the index after it, so a crash leaves either the old
  or the new state, never a half-written version a router could download.
- Restart: the index is read back; if it is missing or unreadable it is rebuilt from the
  version files' own headers, and index entries whose file vanished are dropped.
- Bounded: at most ``keep`` versions stay (the oldest are deleted), routers only want the latest.

Example::

    store = ModelStore("/tmp/models", keep=5)
    meta = store.publish(lambda path, version: agent.save(path, version=version),
                         {"trained_on_records": 500})
    store.latest()["version"], store.read_bytes(meta["version"])[:8]   # (1, b'SPMODEL2')
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from placement.ldwp.modelfile import ModelFileError, load_model, parse_model

__all__ = ["ModelStore", "UnknownVersion", "ModelFileError"]

log = logging.getLogger(__name__)

_VERSION_FILE = re.compile(r"^v(\d{6,})\.spmodel$")
INDEX_NAME = "index.json"


class UnknownVersion(KeyError):
    """A version number the store does not hold (never published, or pruned)."""

    def __str__(self) -> str:  # KeyError would print the repr of its argument
        return str(self.args[0]) if self.args else "unknown model version"


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class ModelStore:
    """Versioned model files in ``model_dir``; thread-safe; keeps at most ``keep`` versions."""

    def __init__(self, model_dir: str | os.PathLike, keep: int = 20):
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self.model_dir = Path(model_dir)
        self.model_dir.mkdir(parents=True, exist_ok=True)
        self.keep = keep
        self._lock = threading.RLock()
        self._versions: dict[int, dict] = {}
        self._load_index()

    # -- paths --------------------------------------------------------------------------------
    @staticmethod
    def filename(version: int) -> str:
        return f"v{version:06d}.spmodel"

    def path(self, version: int) -> Path:
        """The file of ``version``; raises :class:`UnknownVersion` if the store lacks it."""
        self.metadata(version)
        return self.model_dir / self.filename(version)

    # -- reading ------------------------------------------------------------------------------
    def versions(self) -> list[dict]:
        """Metadata of every kept version, oldest first."""
        with self._lock:
            return [dict(self._versions[v]) for v in sorted(self._versions)]

    def latest(self) -> dict | None:
        """Metadata of the newest version, or None for an empty store."""
        with self._lock:
            if not self._versions:
                return None
            return dict(self._versions[max(self._versions)])

    def metadata(self, version: int) -> dict:
        with self._lock:
            try:
                return dict(self._versions[int(version)])
            except KeyError:
                known = sorted(self._versions)
                shown = f"{known[0]}..{known[-1]}" if known else "none yet"
                raise UnknownVersion(f"model version {version} does not exist (versions kept: "
                                     f"{shown})") from None

    def read_bytes(self, version: int) -> bytes:
        """The file's bytes, exactly as published (checked against the recorded sha256)."""
        meta = self.metadata(version)
        data = (self.model_dir / self.filename(version)).read_bytes()
        if hashlib.sha256(data).hexdigest() != meta["sha256"]:
            raise ModelFileError(f"model version {version} on disk does not match its recorded "
                                 "sha256: the file was modified after publishing")
        return data

    def load(self, version: int | None = None):
        """(layers, metadata) of ``version`` (default: latest): the bytes are checked against
        the sha256 recorded when the version was published (:meth:`read_bytes`), then read by
        the model-file reader, which refuses truncated or tampered files; both raise
        :class:`ModelFileError`."""
        if version is None:
            latest = self.latest()
            if latest is None:
                raise UnknownVersion("the model store is empty")
            version = latest["version"]
        return parse_model(self.read_bytes(version), str(self.path(version)))

    # -- writing ------------------------------------------------------------------------------
    def publish(self, save: Callable[[Path, int], object], metadata: dict | None = None) -> dict:
        """Write a new version: ``save(tmp_path, version)`` writes the model file (e.g.
        ``LDWPPolicy.save``); the store checks it loads, moves it into place, records
        ``metadata`` plus version, created_at, sha256 and size, and prunes old versions."""
        with self._lock:
            version = max(self._versions, default=0) + 1
            final = self.model_dir / self.filename(version)
            tmp = self.model_dir / f".{final.name}.{os.getpid()}.tmp"
            try:
                save(tmp, version)
                load_model(tmp)  # never publish a file a router would refuse
                with open(tmp, "rb+") as fh:
                    os.fsync(fh.fileno())
                data = tmp.read_bytes()
                os.replace(tmp, final)
            finally:
                if tmp.exists():
                    tmp.unlink()
            now = time.time()
            entry = {**(metadata or {}), "version": version,
                     "created_at": datetime.fromtimestamp(now, timezone.utc).isoformat(
                         timespec="milliseconds"),
                     "created_at_ms": int(now * 1000),
                     "sha256": hashlib.sha256(data).hexdigest(), "size_bytes": len(data),
                     "filename": final.name}
            self._versions[version] = entry
            self._prune()
            self._write_index()
            return dict(entry)

    def publish_file(self, source: str | os.PathLike, metadata: dict | None = None) -> dict:
        """Publish an existing model file (e.g. a pre-trained one) as the next version; it is
        validated first (:class:`ModelFileError` if it is not a sound model file)."""
        source = Path(source)
        load_model(source)
        return self.publish_bytes(source.read_bytes(), metadata)

    def publish_bytes(self, data: bytes, metadata: dict | None = None) -> dict:
        """Publish a model file's bytes (e.g. a copy of a version already in the store) as the
        next version; validated like every version (:meth:`publish`)."""
        return self.publish(lambda path, _v: path.write_bytes(data), metadata)

    def _prune(self) -> None:
        for version in sorted(self._versions)[:-self.keep]:
            self._versions.pop(version)
            try:
                (self.model_dir / self.filename(version)).unlink()
            except FileNotFoundError:
                pass

    def _write_index(self) -> None:
        body = {"format": 1, "versions": [self._versions[v] for v in sorted(self._versions)]}
        _atomic_write(self.model_dir / INDEX_NAME,
                      json.dumps(body, indent=1, sort_keys=True).encode())

    def _load_index(self) -> None:
        index = self.model_dir / INDEX_NAME
        entries: dict[int, dict] = {}
        if index.is_file():
            try:
                for entry in json.loads(index.read_text())["versions"]:
                    entries[int(entry["version"])] = entry
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("model index %s is unreadable (%s): rebuilding it from the files",
                            index, exc)
                entries = {}
        on_disk = {int(m.group(1)): p for p in self.model_dir.iterdir()
                   if (m := _VERSION_FILE.match(p.name))}
        for version in list(entries):
            if version not in on_disk:
                log.warning("model version %d is in the index but its file is gone: dropped",
                            version)
                entries.pop(version)
        for version, path in on_disk.items():
            if version in entries:
                continue
            try:  # a version written but not indexed (crash between the two writes)
                _layers, meta = load_model(path)
            except ModelFileError as exc:
                log.warning("ignoring %s: %s", path, exc)
                continue
            stat = path.stat()
            entries[version] = {**{k: meta[k] for k in ("trained_on_records",
                                                         "training_data_hash", "nodes")
                                   if k in meta},
                                "version": version,
                                "created_at": datetime.fromtimestamp(
                                    stat.st_mtime, timezone.utc).isoformat(
                                    timespec="milliseconds"),
                                "created_at_ms": int(stat.st_mtime * 1000),
                                "sha256": _sha256_file(path), "size_bytes": stat.st_size,
                                "filename": path.name, "recovered": True}
        self._versions = entries
        if entries:
            self._write_index()
