"""Readers for the real third-party traces, and generators of the same shape.

Sources (one module each; see ``docs/data.md`` for where to get them and their licenses):

- :mod:`.alibaba_gpu`: Alibaba GPU cluster v2023 node inventory and pods;
- :mod:`.alibaba_genai`: Alibaba GenAI v2026 Stable-Diffusion request stream;
- :mod:`.azure_llm`: Azure LLM inference 2023 arrivals with token counts;
- :mod:`.gavel`: Gavel's measured pairwise GPU co-location throughputs.

The data is read from a folder outside the repository (:func:`resolve_data_dir`: argument, env
``STREAMPLACE_DATA_DIR``, ``<checkout>/../shared/data``, ``./data``). ``load_*`` raise
:class:`DataNotFound` when a file is missing; ``load_or_generate_*`` fall back to
:mod:`.generators` and say so in ``source`` and one log line.

Example::

    >>> from workload.traces import load_or_generate_colocation, load_or_generate_nodes
    >>> nodes = load_or_generate_nodes()
    >>> table = load_or_generate_colocation()
    >>> nodes.source                                   # doctest: +SKIP
    '/work/shared/data/alibaba-gpu-v2023/openb_node_list_all_node.csv'
"""

from .alibaba_genai import (
    ALIBABA_GENAI,
    load_genai_qps,
    load_genai_requests,
    load_or_generate_genai,
    read_genai_requests,
)
from .alibaba_gpu import (
    ALIBABA_GPU,
    NODE_FILES,
    POD_VARIANTS,
    load_alibaba_nodes,
    load_alibaba_pods,
    load_or_generate_nodes,
    load_or_generate_pods,
    pod_arrivals,
    read_nodes,
    read_pods,
    sample_nodes,
)
from .azure_llm import (
    AZURE_FILES,
    AZURE_LLM,
    load_azure_llm,
    load_or_generate_azure,
    read_azure_llm,
)
from .datadir import (
    DATA_DIR_ENV,
    DataNotFound,
    DataSource,
    TraceFormatError,
    find_data_file,
    load_or_generate,
    resolve_data_dir,
)
from .gavel import GAVEL, GAVEL_FILES, load_gavel, load_or_generate_colocation, read_gavel
from .generators import (
    bursty_arrivals,
    generate_colocation_table,
    generate_nodes,
    generate_pods,
    generate_requests,
    lognormal_sizes,
    mmpp_arrivals,
    poisson_arrivals,
)
from .records import (
    ColocationStats,
    ColocationTable,
    InferenceRequest,
    JobKey,
    NodeInventory,
    NodeTable,
    PodRecord,
    PodTrace,
    RequestTrace,
    time_compress,
)

#: Every public data set, for listings and docs.
SOURCES = (ALIBABA_GPU, ALIBABA_GENAI, AZURE_LLM, GAVEL)

__all__ = [
    # where the data lives
    "DATA_DIR_ENV", "DataNotFound", "DataSource", "SOURCES", "TraceFormatError",
    "find_data_file", "load_or_generate", "resolve_data_dir",
    # record types
    "ColocationStats", "ColocationTable", "InferenceRequest", "JobKey", "NodeInventory",
    "NodeTable", "PodRecord", "PodTrace", "RequestTrace",
    # Alibaba GPU v2023
    "ALIBABA_GPU", "NODE_FILES", "POD_VARIANTS", "load_alibaba_nodes", "load_alibaba_pods",
    "load_or_generate_nodes", "load_or_generate_pods", "pod_arrivals", "read_nodes", "read_pods",
    "sample_nodes",
    # Alibaba GenAI v2026
    "ALIBABA_GENAI", "load_genai_qps", "load_genai_requests", "load_or_generate_genai",
    "read_genai_requests", "time_compress",
    # Azure LLM 2023
    "AZURE_FILES", "AZURE_LLM", "load_azure_llm", "load_or_generate_azure", "read_azure_llm",
    # Gavel
    "GAVEL", "GAVEL_FILES", "load_gavel", "load_or_generate_colocation", "read_gavel",
    # generators
    "bursty_arrivals", "generate_colocation_table", "generate_nodes", "generate_pods",
    "generate_requests", "lognormal_sizes", "mmpp_arrivals", "poisson_arrivals",
]
