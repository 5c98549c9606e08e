"""Bounds on what the placement service's HTTP API reads and echoes (hostile-input safety).

- :class:`BodySizeLimit`: an ASGI middleware that answers 413 to a request whose body is over
  :data:`MAX_BODY_BYTES`, before anything parses it (a 150 MB ``/decide`` body took ~790 MB
  of memory to be refused by validation). A declared ``Content-Length`` over the limit is
  refused without reading; a chunked body is counted as it arrives and refused once over.
- :func:`bounded_echo`: what a 422 may echo of the input: strings cut, lists and objects
  shortened, nesting cut (a 100k-task body was echoed whole, 4.8 MB).
- :func:`text_safe` (from ``workload.limits``): a string that UTF-8 can encode: a lone
  surrogate (``"\\ud800"``, which ``json.loads`` accepts) is written as its escape text instead
  of failing the response (a 500).

Example::

    app.add_middleware(BodySizeLimit, limit=MAX_BODY_BYTES)
    bounded_echo("x" * 10_000)[-20:]   # '... (9872 more chars)'
"""

from __future__ import annotations

import json

from workload.limits import text_safe   # re-exported: what the service's answers use

__all__ = ["MAX_BODY_BYTES", "MAX_ECHO_CHARS", "MAX_ECHO_ITEMS", "MAX_ECHO_DEPTH",
           "BodySizeLimit", "bounded_echo", "text_safe"]

#: The largest request body accepted, bytes. ``/decide`` takes at most 10,000 tasks and 1,000
#: node states: with 512-character task ids, 128-character types and every node field, that
#: body is about 8 MB of JSON, so 16 MiB leaves room for escaped (non-ASCII) names.
MAX_BODY_BYTES = 16 << 20
#: Longest string a validation error echoes (longer ones are cut, saying how much more).
MAX_ECHO_CHARS = 128
#: Most list items or object keys a validation error echoes per level.
MAX_ECHO_ITEMS = 5
#: Deepest nesting a validation error echoes (deeper values become "...").
MAX_ECHO_DEPTH = 3


def bounded_echo(value, depth: int = 0):
    """``value`` (decoded JSON) cut to at most :data:`MAX_ECHO_CHARS` per string,
    :data:`MAX_ECHO_ITEMS` per list or object and :data:`MAX_ECHO_DEPTH` levels, strings
    made encodable (:func:`text_safe`); what was cut is said in place.

    >>> bounded_echo(list(range(8)))
    [0, 1, 2, 3, 4, '... (3 more items)']
    """
    if isinstance(value, str):
        if len(value) > MAX_ECHO_CHARS:
            value = f"{value[:MAX_ECHO_CHARS]}... ({len(value) - MAX_ECHO_CHARS} more chars)"
        return text_safe(value)
    if isinstance(value, (list, tuple, dict)):
        if depth >= MAX_ECHO_DEPTH:
            return "..."
        more = len(value) - MAX_ECHO_ITEMS
        if isinstance(value, dict):
            out = {bounded_echo(str(k), depth + 1): bounded_echo(v, depth + 1)
                   for k, v in list(value.items())[:MAX_ECHO_ITEMS]}
            if more > 0:
                out["..."] = f"{more} more keys"
            return out
        out = [bounded_echo(v, depth + 1) for v in value[:MAX_ECHO_ITEMS]]
        if more > 0:
            out.append(f"... ({more} more items)")
        return out
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return bounded_echo(str(value), depth)   # an exception object in ctx, bytes, ...


class BodySizeLimit:
    """ASGI middleware: 413 for a request body over ``limit`` bytes (see the module
    docstring); every other request passes through with its body unchanged."""

    def __init__(self, app, limit: int = MAX_BODY_BYTES):
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = self._content_length(scope)
        if declared is not None and declared > self.limit:
            await self._refuse(send, f"a {declared:,}-byte body")
            return
        # Read the body here, counting: a chunked body declares no length. What passes is
        # handed to the app as one message (the app reads the whole body anyway).
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":   # http.disconnect: nothing to answer
                await self.app(scope, _replay([], message, receive), send)
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._refuse(send, "a body")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        await self.app(scope, _replay(chunks, None, receive), send)

    @staticmethod
    def _content_length(scope) -> int | None:
        for name, value in scope.get("headers") or ():
            if name.lower() == b"content-length":
                try:
                    return int(value)
                except ValueError:
                    return None   # the server refuses a malformed length itself
        return None

    async def _refuse(self, send, what: str) -> None:
        body = json.dumps({"detail": f"request body too large: {what} is over the "
                                     f"{self.limit:,}-byte limit"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _replay(chunks: list[bytes], first, receive):
    """A ``receive`` that gives the buffered body (or ``first``) once, then the real one."""
    pending = [first if first is not None else
               {"type": "http.request", "body": b"".join(chunks), "more_body": False}]

    async def replayed():
        if pending:
            return pending.pop()
        return await receive()
    return replayed
