"""Hostile cluster spec files: YAML anchors and aliases (a "billion laughs" bomb took over a
minute of CPU), deep nesting, huge integers and implausible sizes are refused with SpecError
and a reason, at once; every shipped spec still loads."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from workload.cluster_spec import (MAX_CPU_CORES, MAX_GPUS, MAX_MEMORY_MB, MAX_SLOTS,
                                   MAX_SPEC_BYTES, MAX_TASKMANAGERS, MAX_THREADS, SpecError,
                                   load_cluster_spec, shipped_spec_names)

ROOT = Path(__file__).resolve().parents[2]


def node(**fields) -> str:
    lines = "".join(f"    {key}: {value}\n" for key, value in fields.items())
    return "taskmanagers:\n  - id: tm_a\n    cpu_cores: 2\n" + lines


def _bomb(use: str) -> str:
    """Nine aliases nested nine deep: 9**9 (387 million) values once expanded."""
    text = "a: &a [x, x, x, x, x, x, x, x, x]\n"
    for level in range(8):
        prev, name = chr(97 + level), chr(98 + level)
        text += f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]\n"
    return text + use


CASES = [
    # (label, file text, a word of the reason)
    ("alias bomb in labels", _bomb("taskmanagers: [{id: tm_a, cpu_cores: 1, labels: *i}]\n"),
     "aliases"),
    ("alias bomb as taskmanagers", _bomb("taskmanagers: *i\n"), "aliases"),
    ("one harmless alias", "base: &b {cpu_cores: 1}\ntaskmanagers: [{id: tm_a, <<: *b}]\n",
     "aliases"),
    ("an anchor alone", "taskmanagers: [&n {id: tm_a, cpu_cores: 1}]\n", "anchors"),
    ("nested 10k deep", "taskmanagers: " + "[" * 10_000 + "]" * 10_000 + "\n", "nested too deeply"),
    ("a 5000-digit int", node(slots="9" * 5000), "4300 digits"),
    ("cpu_cores 1e300", node().replace("cpu_cores: 2", "cpu_cores: 1.0e300"), "cpu_cores"),
    ("cpu_cores over the bound", node().replace("cpu_cores: 2", f"cpu_cores: {MAX_CPU_CORES + 1}"),
     "cpu_cores"),
    ("slots 10**30", node(slots=10 ** 30), "slots"),
    ("slots over the bound", node(slots=MAX_SLOTS + 1), "slots"),
    ("task_heap_mb 10**30", node(task_heap_mb=10 ** 30), "task_heap_mb"),
    ("managed_mb over 16 TiB", node(managed_mb=MAX_MEMORY_MB + 1), "managed_mb"),
    ("threads 10**9", node(threads=10 ** 9), "threads"),
    ("threads over the bound", node(threads=MAX_THREADS + 1), "threads"),
    ("negative cpu_affinity", node(cpu_affinity="[-1]"), "cpu_affinity"),
    ("cpu_affinity id over the bound", node(cpu_affinity=f"[{MAX_CPU_CORES}]"), "cpu_affinity"),
    ("negative gpu id", node(gpu_ids="[-5]"), "gpu_ids"),
    ("gpu id over the bound", node(gpu_ids=f"[{MAX_GPUS}]"), "gpu_ids"),
    ("work_multiplier 1e300", node(work_multiplier="1.0e300"), "work_multiplier"),
    ("too many taskmanagers", "taskmanagers:\n" + "".join(
        f"  - {{id: tm_{i}, cpu_cores: 1}}\n" for i in range(MAX_TASKMANAGERS + 1)),
     "taskmanagers"),
    ("a file over the size bound", "# " + "x" * MAX_SPEC_BYTES + "\n" + node(), "limit"),
]


@pytest.mark.parametrize("label,text,reason", CASES, ids=[c[0] for c in CASES])
def test_hostile_specs_are_refused_at_once_with_spec_error(tmp_path, label, text, reason):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    started = time.process_time()
    with pytest.raises(SpecError, match=reason):
        load_cluster_spec(path)
    assert time.process_time() - started < 5.0


@pytest.mark.parametrize("fields", [
    {"cpu_affinity": "[0, 1]", "gpu_ids": "[0]", "slots": MAX_SLOTS, "threads": MAX_THREADS,
     "task_heap_mb": MAX_MEMORY_MB, "managed_mb": 64, "work_multiplier": 2.0},
    {"labels": "[gpu, fast]"},
])
def test_plausible_specs_at_the_bounds_still_load(tmp_path, fields):
    path = tmp_path / "spec.yaml"
    path.write_text(node(**fields).replace("cpu_cores: 2", f"cpu_cores: {MAX_CPU_CORES}"))
    spec = load_cluster_spec(path)
    assert spec.taskmanagers[0].cpu_cores == MAX_CPU_CORES


@pytest.mark.parametrize("name", shipped_spec_names())
def test_every_shipped_spec_still_loads(name):
    assert load_cluster_spec(name).taskmanagers


def test_the_docker_spec_still_loads():
    assert load_cluster_spec(ROOT / "docker" / "streamplace" / "cluster-spec.yaml").taskmanagers
