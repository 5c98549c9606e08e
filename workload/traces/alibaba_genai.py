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
import zlib
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from ._parse import (
    MAX_FILE_BYTES,
    CsvRow,
    SpanCheck,
    member_text,
    open_bounded,
    parse_timestamp,
    read_csv,
    shown,
)
from .datadir import DataNotFound, DataSource, TraceFormatError, find_data_file, load_or_generate
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

# Upper bounds of the numeric columns, far above the real file's maxima (in brackets).
#: One request's execution time in seconds: a week [567 s].
MAX_EXEC_S = 7 * 86400
#: Prompt and negative-prompt length [1,288 and 290].
MAX_PROMPT_LENGTH = 1_000_000
#: Images per prompt [1-8] and inference steps [1-100]. Both start at 1: the replay reads a 0
#: as "unknown" (30 steps, 1 image), so a 0 in the file would silently become another value.
MAX_IMAGES = 100
MAX_STEPS = 1_000
#: LoRA adapters per request [6].
MAX_LORA = 100
#: Members an archive may list before ``qps.csv`` is found [1].
MAX_ARCHIVE_MEMBERS = 10_000
#: QPS samples are epoch seconds [2022-09-11/12], perhaps shifted to 0 by anonymisation: at
#: most the start of 2100. Values are requests/s of one container [3.3]; even MAX_ROWS samples
#: of this size sum to a finite 2.5e11.
MAX_QPS_TIMESTAMP = 4_102_444_800.0
MAX_QPS = 1e6


def read_genai_requests(path: str | Path, *, name: str = "lora") -> RequestTrace:
    """Read a ``lora_request_trace.csv``-format file, sorted by arrival.

    ``arrival_s`` counts from the earliest request; ``exec_time_ms`` is ``exec_time_seconds``
    x 1000; empty prompt length, images, steps or model id become ``None``.

    Example::

        >>> # read_genai_requests(".../lora_request_trace.csv")[0].exec_time_ms -> 32000.0
    """
    stamped, span = [], SpanCheck(path)
    for row in read_csv(path, _REQUEST_COLUMNS):
        stamp = parse_timestamp(row, "gmt_create")
        span.add(stamp, row.line)
        stamped.append((stamp, _request_fields(row, name)))
    return trace_from_timestamps(name, stamped, str(path))


def _request_fields(row: CsvRow, name: str) -> dict:
    exec_s = row.number("exec_time_seconds", min_value=0, max_value=MAX_EXEC_S)
    return dict(
        request_id=f"{name}-{row.line}", kind=row.text("predict_type"),
        status=row.text("predict_status"), exec_time_ms=exec_s * 1000.0,
        group_id=row.text("groupId"),
        prompt_length=row.integer("prompt_length", optional=True, min_value=0,
                                  max_value=MAX_PROMPT_LENGTH),
        negative_prompt_length=row.integer("negative_prompt_length", optional=True,
                                           min_value=0, max_value=MAX_PROMPT_LENGTH),
        images=row.integer("num_images_per_prompt", optional=True, min_value=1,
                           max_value=MAX_IMAGES),
        steps=row.integer("num_inference_steps", optional=True, min_value=1,
                          max_value=MAX_STEPS),
        model_id=row.text("checkpoint_model_version_id", optional=True),
        num_lora=row.integer("num_lora", min_value=0, max_value=MAX_LORA),
    )


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
        with open_bounded(archive) as raw, tarfile.open(fileobj=raw, mode="r:gz") as tar:
            member = _qps_member(tar, archive)
            # Decoded and parsed as it is decompressed: never the whole member in memory.
            name = f"{archive}:{member.name[:100]}"
            rows = read_csv(name, _QPS_COLUMNS, text=member_text(tar.extractfile(member)))
            totals = _qps_totals(rows, request_type, name)
    except DataNotFound:
        raise
    except (tarfile.TarError, OSError, EOFError, zlib.error, MemoryError) as exc:
        raise TraceFormatError(archive, None,
                               f"cannot read the archive: {shown(str(exc))}") from None
    if not totals:
        return []
    first = min(totals)
    return [(t - first, totals[t]) for t in sorted(totals)]


def _qps_member(tar: tarfile.TarFile, archive: Path) -> tarfile.TarInfo:
    """The first ``*qps.csv`` file of the archive, looked for through a bounded number of
    members; every member's size is bounded before any of it is read or skipped over."""
    skipped = 0
    for count, member in enumerate(tar, 1):
        if count > MAX_ARCHIVE_MEMBERS:
            raise TraceFormatError(archive, None, f"more than {MAX_ARCHIVE_MEMBERS} members "
                                                  f"before a qps.csv")
        if member.size > MAX_FILE_BYTES:
            raise TraceFormatError(archive, None, f"member {shown(member.name)} holds "
                                                  f"{member.size} bytes, more than "
                                                  f"{MAX_FILE_BYTES}")
        if member.isfile() and member.name.endswith("qps.csv"):
            return member
        skipped += member.size
        if skipped > MAX_FILE_BYTES:
            raise TraceFormatError(archive, None, f"members before qps.csv hold more than "
                                                  f"{MAX_FILE_BYTES} bytes")
    raise TraceFormatError(archive, None, "archive holds no qps.csv")


def _qps_totals(rows: Iterator[CsvRow], request_type: str | None,
                name: str) -> dict[float, float]:
    totals: dict[float, float] = defaultdict(float)
    span = SpanCheck(name)
    for row in rows:
        if request_type is None or row.text("request_type") == request_type:
            stamp = row.number("timestamp_anon", min_value=0, max_value=MAX_QPS_TIMESTAMP)
            span.add(stamp, row.line)
            totals[stamp] += row.number("value", min_value=0, max_value=MAX_QPS)
    return totals


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
