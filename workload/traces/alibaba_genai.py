"""Alibaba GenAI serving trace v2026: Stable-Diffusion requests with execution times.

Files (under ``<data dir>/alibaba-genai-v2026-requests/``):

- ``lora_request_trace.csv``: 26,823 requests over ~23 days, columns ``gmt_create, predict_type,
  predict_status, exec_time_seconds, groupId, prompt_length, negative_prompt_length,
  num_images_per_prompt, num_inference_steps, checkpoint_model_version_id, num_lora``.
  Timestamps have one-second resolution; 25 rows have no model id / steps / images (kept, as
  ``None``).
- ``qps.tar.gz`` holding ``qps.csv``: per-container QPS samples (``timestamp_anon, value,
  container_ip, request_type``), summed per timestamp by :func:`load_genai_qps`.

Example::

    >>> from workload.traces import load_or_generate_genai, time_compress
    >>> trace = load_or_generate_genai()               # real file if present, else generated
    >>> replay = time_compress(trace.arrivals(), 1000)  # 23 days -> about 33 minutes
"""

from __future__ import annotations

import tarfile
from collections import defaultdict
from pathlib import Path

from ._parse import parse_timestamp, read_csv, text_member
from .datadir import DataSource, TraceFormatError, find_data_file, load_or_generate
from .records import InferenceRequest, RequestTrace, time_compress, trace_from_timestamps

__all__ = [
    "ALIBABA_GENAI",
    "InferenceRequest",
    "RequestTrace",
    "load_genai_qps",
    "load_genai_requests",
    "load_or_generate_genai",
    "read_genai_requests",
    "time_compress",
]

ALIBABA_GENAI = DataSource(
    folder="alibaba-genai-v2026-requests",
    title="Alibaba GenAI serving trace v2026",
    url="https://github.com/alibaba/clusterdata/tree/master/cluster-trace-v2026-GenAI",
    license="research/study use, cite the authors' SoCC / EuroSys papers",
)

REQUEST_FILE = "lora_request_trace.csv"
QPS_ARCHIVE = "qps.tar.gz"

_REQUEST_COLUMNS = ("gmt_create", "predict_type", "predict_status", "exec_time_seconds",
                    "groupId", "prompt_length", "negative_prompt_length",
                    "num_images_per_prompt", "num_inference_steps",
                    "checkpoint_model_version_id", "num_lora")
_QPS_COLUMNS = ("timestamp_anon", "value", "request_type")


def read_genai_requests(path: str | Path, *, name: str = "lora") -> RequestTrace:
    """Read a ``lora_request_trace.csv``-format file, sorted by arrival.

    ``arrival_s`` counts from the earliest request; ``exec_time_ms`` is ``exec_time_seconds``
    x 1000; empty prompt length, images, steps or model id become ``None``.

    Example::

        >>> # read_genai_requests(".../lora_request_trace.csv")[0].exec_time_ms -> 32000.0
    """
    stamped = []
    for row in read_csv(path, _REQUEST_COLUMNS):
        stamp = parse_timestamp(row, "gmt_create")
        exec_s = row.number("exec_time_seconds", min_value=0)
        stamped.append((stamp, dict(
            request_id=f"{name}-{row.line}", kind=row.text("predict_type"),
            status=row.text("predict_status"), exec_time_ms=exec_s * 1000.0,
            group_id=row.text("groupId"),
            prompt_length=row.integer("prompt_length", optional=True, min_value=0),
            negative_prompt_length=row.integer("negative_prompt_length", optional=True,
                                               min_value=0),
            images=row.integer("num_images_per_prompt", optional=True, min_value=0),
            steps=row.integer("num_inference_steps", optional=True, min_value=0),
            model_id=row.text("checkpoint_model_version_id", optional=True),
            num_lora=row.integer("num_lora", min_value=0),
        )))
    return trace_from_timestamps(name, stamped, str(path))


def load_genai_requests(data_dir: str | Path | None = None) -> RequestTrace:
    """The 26,823 GenAI requests (all statuses; filter with ``trace.filter(...)``).

    Example::

        >>> trace = load_genai_requests()                                   # doctest: +SKIP
        >>> ok = trace.filter(lambda r: r.status == "SUCCEED")              # doctest: +SKIP
        >>> len(ok)                                                         # doctest: +SKIP
        26392
    """
    return read_genai_requests(find_data_file(ALIBABA_GENAI, REQUEST_FILE, data_dir))


def load_genai_qps(data_dir: str | Path | None = None, *,
                   request_type: str | None = "Generative Requests") -> list[tuple[float, float]]:
    """Gateway QPS over time: ``[(seconds from the first sample, total QPS), ...]``.

    The archive holds per-container samples; they are summed per timestamp. ``request_type``
    is ``"Generative Requests"``, ``"API Requests"`` or ``None`` for both.

    Example::

        >>> series = load_genai_qps()                                       # doctest: +SKIP
        >>> series[0][0]                                                    # doctest: +SKIP
        0.0
    """
    archive = find_data_file(ALIBABA_GENAI, QPS_ARCHIVE, data_dir)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            member = next((m for m in tar.getmembers()
                           if m.isfile() and m.name.endswith("qps.csv")), None)
            if member is None:
                raise TraceFormatError(archive, None, "archive holds no qps.csv")
            data = tar.extractfile(member).read()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise TraceFormatError(archive, None, f"cannot read the archive: {exc}") from None
    totals: dict[float, float] = defaultdict(float)
    for row in read_csv(f"{archive}:{member.name}", _QPS_COLUMNS, text=text_member(data)):
        if request_type is None or row.text("request_type") == request_type:
            totals[row.number("timestamp_anon")] += row.number("value", min_value=0)
    if not totals:
        return []
    first = min(totals)
    return [(t - first, totals[t]) for t in sorted(totals)]


def load_or_generate_genai(data_dir: str | Path | None = None, *, seed: int = 0,
                           n_requests: int = 26823) -> RequestTrace:
    """:func:`load_genai_requests`, or generated GenAI-like requests if the file is missing.

    Example::

        >>> t = load_or_generate_genai("/nonexistent", n_requests=50)
        >>> len(t), t.source.startswith("generated: ")
        (50, True)
    """
    from .generators import generate_requests

    return load_or_generate(lambda: load_genai_requests(data_dir),
                            lambda: generate_requests(n_requests, seed=seed, style="genai"))
