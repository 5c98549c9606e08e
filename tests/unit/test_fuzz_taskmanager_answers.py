"""Property-based fuzzing of what streamplace reads of Flink's TaskManagers and of a
``gpu_model`` setting: whatever REST answers, or a user types, the reading never raises
anything but the documented errors and every number it keeps is finite and within its bounds.

Hypothesis, derandomized (the same examples on every run), no example database.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from placement.service.flink_rest import (MAX_TASKMANAGER_CORES, MAX_TASKMANAGER_SLOTS,
                                          listed_taskmanager, registered_taskmanager)
from pyflink_jobs.live_cluster import live_taskmanagers_from
from workload.cluster_spec import MAX_MEMORY_MB, MIN_MEMORY_MB
from workload.model import MAX_NODE_GPUS, MAX_SETTING_GPU_SPEED, parse_gpu_model

FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None)

#: JSON's values, with the numbers REST could garble: huge, negative, NaN, infinite, booleans
NUMBERS = st.one_of(st.integers(min_value=-10**400, max_value=10**400),
                    st.floats(allow_nan=True, allow_infinity=True), st.booleans())
SCALARS = st.one_of(st.none(), NUMBERS, st.text(max_size=12))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)
IDS = st.one_of(st.sampled_from(["tm_a", "edge_1", "127.0.0.1:4123-ab12cd", "", "x" * 201]),
                st.text(max_size=12), NUMBERS, st.none())
RESOURCES = st.dictionaries(st.one_of(st.sampled_from(["gpu", "tm_a", "edge_1"]),
                                      st.text(max_size=8)),
                            st.one_of(NUMBERS, SCALARS), max_size=4)
TOTAL = st.one_of(JSON, st.fixed_dictionaries({}, optional={
    "cpuCores": st.one_of(NUMBERS, SCALARS), "taskHeapMemory": st.one_of(NUMBERS, SCALARS),
    "managedMemory": st.one_of(NUMBERS, SCALARS),
    "extendedResources": st.one_of(RESOURCES, JSON)}))
ENTRIES = st.one_of(JSON, st.fixed_dictionaries({"id": IDS}, optional={
    "slotsNumber": st.one_of(NUMBERS, SCALARS), "totalResource": TOTAL,
    "hardware": st.one_of(JSON, st.fixed_dictionaries({"cpuCores": st.one_of(NUMBERS,
                                                                             SCALARS)}))}))


@FUZZ
@given(ENTRIES)
def test_any_rest_entry_reads_as_a_bounded_taskmanager_or_none(entry):
    tm = registered_taskmanager(listed_taskmanager(entry))
    if tm is None:
        return
    assert isinstance(tm.node_id, str) and 0 < len(tm.node_id) <= 200
    assert isinstance(tm.cpu_cores, int) and 1 <= tm.cpu_cores <= MAX_TASKMANAGER_CORES
    assert isinstance(tm.slots, int) and 1 <= tm.slots <= MAX_TASKMANAGER_SLOTS
    assert isinstance(tm.gpus, int) and 0 <= tm.gpus <= MAX_NODE_GPUS
    if tm.memory_mb is not None:
        assert all(MIN_MEMORY_MB <= mb <= MAX_MEMORY_MB for mb in tm.memory_mb)
    assert math.isfinite(tm.memory_gb) and tm.memory_gb > 0
    assert all(isinstance(k, str) and math.isfinite(v) and v >= 0
               for k, v in tm.resources.items())
    assert tm.own_resource == tm.resources.get(tm.node_id, 0.0)


@FUZZ
@given(st.one_of(JSON, st.fixed_dictionaries({"taskmanagers": st.lists(ENTRIES, max_size=5)})))
def test_the_hooks_reading_of_any_answer_is_a_sorted_list_or_none(answer):
    live = live_taskmanagers_from(answer)
    if live is None:
        return
    ids = [tm.node_id for tm in live]
    assert ids == sorted(set(ids))
    assert all(math.isfinite(tm.memory_gb) and tm.own_resource >= 0 for tm in live)


@FUZZ
@given(st.one_of(st.text(max_size=50), st.from_regex(r"[a-z0-9]{1,8}:[-+0-9.eEinfa]{0,10}",
                                                     fullmatch=True)))
def test_a_gpu_model_setting_reads_as_a_name_and_a_bounded_speed_or_a_value_error(setting):
    try:
        name, speed = parse_gpu_model(setting)
    except ValueError:
        return
    assert 1 <= len(name) <= 40 and ":" not in name
    assert speed is None or (math.isfinite(speed) and 0 < speed <= MAX_SETTING_GPU_SPEED)
