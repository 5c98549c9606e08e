"""A built-in app's task input: its clip, made once per task and copied once per device.

:class:`TaskClip` is the (T, H, W) clip every stage of one :class:`NodeExecutor` task reads.
It is made on the CPU by the first stage that needs it (the others of the task wait for it),
then copied to each device a stage runs on:

- without a payload, synthetic frames from the task's ``input_size`` and seed
  (``workload.apps.registry.task_frames``), as always;
- with a payload (a TaskEvent's ``payload``: the SPCL container of JPEG/PNG frames), the
  frames decoded from it (``task_frames_from_payload``, bounded by ``limits``). A payload that
  does not decode raises :class:`BadPayload`; the failure is kept, so the task's other stages
  get the same error without decoding again, and the executor fails the task at once instead
  of retrying it (the bytes will not get better).

Making the clip is tracked as a co-runner (``track``, e.g. the executor's ``FRAMES``): decoding
or generating frames loads a core like a stage does.

Example::

    >>> from workload.apps.registry import task_payload
    >>> clip = TaskClip("video_synopsis", 4096, seed=0, payload=task_payload("video_synopsis",
    ...                                                                       4096, "t1"))
    >>> tuple(clip.on("cpu").shape), clip.decoded
    ((8, 32, 40), True)
    >>> TaskClip("video_synopsis", 4096, seed=0, payload=b"junk").on("cpu")
    Traceback (most recent call last):
    ...
    interference.executor.clips.BadPayload: bad payload: not a clip payload: ...
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, ContextManager

from workload.cancel import StageCancelled, check_cancelled

__all__ = ["BadPayload", "TaskClip", "check_payload_type"]

#: What a payload may be (what the Avro codec gives for ``bytes``, and views of it).
PAYLOAD_TYPES = (bytes, bytearray, memoryview)


class BadPayload(ValueError):
    """A task's payload does not decode to a clip: the task fails at once, without retries."""


def check_payload_type(payload: Any) -> str | None:
    """Why ``payload`` cannot be a task's payload at all (None: it may be; None is allowed).
    Cheap, for admission; the content is checked when the clip is decoded.

    Example::

        >>> check_payload_type(b"SPCL..") is None, check_payload_type(None) is None
        (True, True)
        >>> check_payload_type("text")
        'bad payload: it must be bytes (the encoded clip) or None, got str'
    """
    if payload is None or isinstance(payload, PAYLOAD_TYPES):
        return None
    return f"bad payload: it must be bytes (the encoded clip) or None, got {type(payload).__name__}"


class TaskClip:
    """One task's clip (see the module doc). ``payload`` None: synthetic frames of
    ``input_size`` pixels from ``seed``; else the clip decoded from it under ``limits``
    (``workload.apps.images.PayloadLimits``; default: its ``DEFAULT_LIMITS``). Thread-safe."""

    def __init__(self, app_id: str, input_size: int, seed: int, payload: bytes | None = None,
                 limits=None) -> None:
        self.app_id = app_id
        self.input_size = input_size
        self.seed = seed
        self.decoded = payload is not None  # whether the frames come from a payload
        self._payload = payload
        self._limits = limits
        self._frames: dict[str, Any] = {}  # device -> the clip there
        self._error: BadPayload | None = None
        self._lock = threading.Lock()

    def on(self, device: str, stream=None,
           track: Callable[[], ContextManager] | None = None):
        """The clip on ``device`` (made on the CPU first, under ``track()``); ``stream``: the
        CUDA stream the copy is made on, synchronised because other streams will read it.
        Raises :class:`BadPayload` for a payload that does not decode, and
        :class:`~workload.cancel.StageCancelled` when the calling stage's task was
        cancelled (while it waited for another stage making the clip, or while making it)."""
        with self._lock:
            if self._error is not None:
                raise self._error
            check_cancelled()
            if "cpu" not in self._frames:
                with (track() if track is not None else contextlib.nullcontext()):
                    self._frames["cpu"] = self._make()
            if device not in self._frames:
                self._frames[device] = self._frames["cpu"].to(device)
                if stream is not None:  # other streams will read it: the copy must be done
                    stream.synchronize()
            return self._frames[device]

    def _make(self):
        if self._payload is None:
            from workload.apps.registry import task_frames
            return task_frames(self.app_id, self.input_size, self.seed)
        from workload.apps.images import DEFAULT_LIMITS
        from workload.apps.registry import task_frames_from_payload
        try:
            frames = task_frames_from_payload(self.app_id, self._payload, "cpu",
                                              self._limits or DEFAULT_LIMITS)
        except StageCancelled:  # the task was cancelled, the bytes may be fine
            raise
        except Exception as exc:  # noqa: BLE001 - hostile bytes: any decode error is bad input
            # PayloadError already says what is wrong; anything else (a decoder bug, memory)
            # is named by its type so the result says it was the payload, not a stage.
            detail = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
            self._error = BadPayload(f"bad payload: {detail}")
            self._payload = None
            raise self._error from None
        self._payload = None  # decoded: the bytes are not needed any more
        return frames

    def clear(self) -> None:
        """Free the frames (the task is done)."""
        with self._lock:
            self._frames.clear()
            self._payload = None
