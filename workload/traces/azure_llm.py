"""Azure LLM inference trace 2023 (Splitwise): one bursty hour of request arrivals with tokens.

Files (under ``<data dir>/azure-llm-inference-2023/``): ``AzureLLMInferenceTrace_code.csv``
(8,819 requests) and ``AzureLLMInferenceTrace_conv.csv`` (19,366), columns ``TIMESTAMP,
ContextTokens, GeneratedTokens``; timestamps carry 7 fractional digits.

Example::

    >>> from workload.traces import load_or_generate_azure
    >>> trace = load_or_generate_azure(kind="conv")    # real file if present, else generated
    >>> sizes = [r.context_tokens for r in trace]      # per-record work size
"""

from __future__ import annotations

from pathlib import Path

from ._parse import SpanCheck, parse_timestamp, read_csv
from .datadir import DataSource, find_data_file, load_or_generate
from .records import InferenceRequest, RequestTrace, trace_from_timestamps

__all__ = [
    "AZURE_FILES",
    "AZURE_LLM",
    "InferenceRequest",
    "RequestTrace",
    "load_azure_llm",
    "load_or_generate_azure",
    "read_azure_llm",
]

AZURE_LLM = DataSource(
    folder="azure-llm-inference-2023",
    title="Azure LLM inference trace 2023",
    url="https://github.com/Azure/AzurePublicDataset (data/AzureLLMInferenceTrace_*.csv)",
    license="CC-BY 4.0, cite Patel et al., Splitwise, ISCA 2024",
)

#: ``kind`` -> file name.
AZURE_FILES = {"code": "AzureLLMInferenceTrace_code.csv", "conv": "AzureLLMInferenceTrace_conv.csv"}
_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
#: Most tokens in one request's context or output: 10 million, 700x the real maximum (14,050
#: context tokens; 1,899 generated) and beyond any model's context window.
MAX_TOKENS = 10_000_000


def _read_stamped(path: str | Path, kind: str) -> list:
    stamped, span = [], SpanCheck(path)
    for row in read_csv(path, _COLUMNS):
        stamp = parse_timestamp(row, "TIMESTAMP")
        span.add(stamp, row.line)
        stamped.append((stamp, dict(
            request_id=f"{kind}-{row.line}", kind=kind,
            context_tokens=row.integer("ContextTokens", min_value=0, max_value=MAX_TOKENS),
            generated_tokens=row.integer("GeneratedTokens", min_value=0, max_value=MAX_TOKENS),
        )))
    return stamped


def read_azure_llm(path: str | Path, *, kind: str = "code") -> RequestTrace:
    """Read one Azure LLM trace CSV from an explicit path; ``kind`` labels its requests.

    Example::

        >>> # read_azure_llm(".../AzureLLMInferenceTrace_code.csv").duration_s -> about 3,400
    """
    return trace_from_timestamps(kind, _read_stamped(path, kind), str(path))


def load_azure_llm(data_dir: str | Path | None = None, *, kind: str = "code") -> RequestTrace:
    """Azure LLM requests: ``kind="code"`` (8,819), ``"conv"`` (19,366) or ``"both"`` (merged).

    With ``"both"`` the two streams share one clock (arrival 0 = the earliest request of either)
    and ``source`` lists both files.

    Example::

        >>> both = load_azure_llm(kind="both")                              # doctest: +SKIP
        >>> len(both)                                                       # doctest: +SKIP
        28185
    """
    kinds = list(AZURE_FILES) if kind == "both" else [kind]
    if any(k not in AZURE_FILES for k in kinds):
        raise ValueError(f"kind must be 'code', 'conv' or 'both', got {kind!r}")
    paths = [find_data_file(AZURE_LLM, AZURE_FILES[k], data_dir) for k in kinds]
    stamped = [item for k, p in zip(kinds, paths) for item in _read_stamped(p, k)]
    return trace_from_timestamps(kind, stamped, " + ".join(str(p) for p in paths))


def load_or_generate_azure(data_dir: str | Path | None = None, *, kind: str = "code",
                           seed: int = 0, n_requests: int | None = None) -> RequestTrace:
    """:func:`load_azure_llm`, or a generated bursty LLM trace of the same shape if missing.

    ``n_requests`` defaults to the real size (8,819 code, 19,366 conv, 28,185 both).

    Example::

        >>> load_or_generate_azure("/nonexistent", n_requests=30).source.startswith("generated")
        True
    """
    from .generators import generate_requests

    size = n_requests or {"code": 8819, "conv": 19366}.get(kind, 8819 + 19366)
    return load_or_generate(
        lambda: load_azure_llm(data_dir, kind=kind),
        lambda: generate_requests(size, seed=seed, style="llm", name=kind, duration_s=3600.0),
    )
