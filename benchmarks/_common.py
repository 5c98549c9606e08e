"""Shared benchmark bookkeeping: every result file records how it was made."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    import psutil
    return {"python": platform.python_version(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
            "processor": platform.processor() or platform.machine()}


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=RESULTS.parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_result(name: str, payload: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    document = {"benchmark": name, "command": " ".join([Path(sys.executable).name] + sys.argv),
                "git_commit": git_commit(), "machine": machine(), **payload}
    path = RESULTS / f"{name}.json"
    # numpy scalars (scipy intervals, comparisons of them) are written as plain numbers
    path.write_text(json.dumps(document, indent=2,
                               default=lambda o: o.item() if hasattr(o, "item") else str(o))
                    + "\n")
    return path
