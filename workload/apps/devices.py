"""Moving stage outputs between devices.

Stage outputs are tensors, dataclasses of tensors, or lists/tuples/dicts of those. GPU-capable
operators keep everything on their input's device; the CPU-only ones (tracking, tube stitching)
call :func:`to_device` on their inputs first, so the co-scheduler may run any stage anywhere.

Example::

    >>> import torch
    >>> to_device({"a": torch.zeros(2)}, "cpu")["a"].device.type
    'cpu'
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

__all__ = ["to_device"]


def to_device(obj: Any, device: str | torch.device) -> Any:
    """A copy of ``obj`` with every tensor inside moved to ``device`` (non-tensors unchanged).

    Dataclass instances are rebuilt field by field with :func:`dataclasses.replace`, so output
    types survive the move.

    Example::

        >>> import torch
        >>> to_device([torch.ones(1)], "cpu")[0].tolist()
        [1.0]
    """
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: to_device(getattr(obj, f.name), device)
                   for f in dataclasses.fields(obj) if f.init}
        return dataclasses.replace(obj, **changes)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device) for v in obj)
    return obj
