"""The placement service's bearer token, kept in a file that only its owner can read.

The service listens on loopback unless told otherwise. With ``isolation: host`` the hooks run
inside the emulated hosts' namespaces, where loopback is their own, so ``streamplace serve``
binds the head address instead, and any address but loopback needs a token
(:meth:`placement.service.settings.ServiceSettings.check_security`). When no token is configured
(``service.token``, ``--token``, ``$STREAMPLACE_SERVICE_TOKEN``), ``serve`` makes one and writes
it to ``<home>/service.token`` (mode 0600); ``streamplace job submit`` reads it from there, so a
user never types it. The file is untrusted input like any other: it is read only when it is a
regular file of at most MAX_TOKEN_FILE_BYTES that no one but its owner can read or write, and
its content must be a token of TOKEN_PATTERN.

Example::

    >>> import tempfile
    >>> home = Path(tempfile.mkdtemp())
    >>> token = ensure_token(home)
    >>> read_token(home) == token, len(token)
    (True, 32)
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from pathlib import Path

__all__ = ["TOKEN_FILE", "TOKEN_PATTERN", "MAX_TOKEN_FILE_BYTES", "TokenFileError",
           "token_path", "read_token", "ensure_token"]

#: file name under the streamplace home
TOKEN_FILE = "service.token"
#: what a token may look like: the service's own bound (8+ characters), URL-safe characters
TOKEN_PATTERN = re.compile(r"[A-Za-z0-9_.~+/=-]{8,256}")
#: a token file larger than this is not a token file
MAX_TOKEN_FILE_BYTES = 1024
#: random bytes of a generated token (hex: twice as many characters)
TOKEN_BYTES = 16


class TokenFileError(ValueError):
    """The token file exists but cannot be trusted or read (says why)."""


def token_path(home: str | os.PathLike) -> Path:
    return Path(home) / TOKEN_FILE


def read_token(home: str | os.PathLike) -> str | None:
    """The token in ``<home>/service.token``, or None when there is no such file. Raises
    :class:`TokenFileError` for a file that is not a regular file, is readable or writable by
    others, is too large, or holds no valid token."""
    path = token_path(home)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise TokenFileError(f"{path}: cannot be read ({exc.strerror})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise TokenFileError(f"{path} is not a regular file")
    with os.fdopen(fd, "rb") as handle:
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise TokenFileError(f"{path} is readable or writable by others (mode "
                                 f"{stat.S_IMODE(info.st_mode):o}); chmod 600 it or remove it")
        data = handle.read(MAX_TOKEN_FILE_BYTES + 1)
    if len(data) > MAX_TOKEN_FILE_BYTES:
        raise TokenFileError(f"{path} is larger than {MAX_TOKEN_FILE_BYTES} bytes")
    token = data.decode("ascii", errors="replace").strip()
    if not TOKEN_PATTERN.fullmatch(token):
        raise TokenFileError(f"{path} does not hold a token (8-256 URL-safe characters)")
    return token


def ensure_token(home: str | os.PathLike) -> str:
    """The token of ``<home>/service.token``, made (random, mode 0600) when there is none."""
    existing = read_token(home)
    if existing is not None:
        return existing
    path = token_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(TOKEN_BYTES)
    # created 0600 from the start (no window where others could read it), then moved into place
    tmp = path.with_name(f".{TOKEN_FILE}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(token + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return token
