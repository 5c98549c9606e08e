"""Hostile records on the router's path: whatever a record or its exception holds, the record
leaves as a dead letter with a reason, and the router goes on; whatever a user's type function
gives or raises, the record gets the default type and the warning can be written.
Also a model file whose own version is implausible (pyflink_jobs/router.py)."""

from __future__ import annotations

import pytest

from pyflink_jobs.flink_ops import make_dead_letter
from pyflink_jobs.router_function import OperatorRecords, Refused, TaskEventRecords
from workload.codec import decode, encode
from workload.operators import as_operator

from flink_fakes import FakeContext
from test_router import NODES, FakeClock, FakeService, _agent


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("my __str__ raises")


def _letter(*args):
    return decode("DeadLetter", make_dead_letter(*args))


# (what, make_dead_letter's arguments, what the decoded letter must hold)
DEAD_LETTER_CASES = [
    ("a lone surrogate in the reason", (b"r", "t", 0, 1, "type \ud800 refused", "limits"),
     {"reason": "type \\ud800 refused", "partition": 0, "offset": 1}),
    ("a lone surrogate in the topic", (b"r", "t\ud800", 1, 2, "why", "shape"),
     {"source_topic": "t\\ud800"}),
    ("a partition past Avro's int", (b"r", "t", 2 ** 40, 5, "why", "shape"),
     {"partition": -1, "offset": 5}),
    ("an offset past Avro's long", (b"r", "t", 3, 2 ** 70, "why", "shape"),
     {"partition": 3, "offset": -1}),
    ("an infinite partition", (b"r", "t", float("inf"), None, "why", "shape"),
     {"partition": -1, "offset": -1}),
    ("a record that is not bytes", ({"k": 1}, None, None, None, "why", "read"),
     {"source_topic": "", "stage": "read"}),
]


@pytest.mark.parametrize("args,expected", [c[1:] for c in DEAD_LETTER_CASES],
                         ids=[c[0] for c in DEAD_LETTER_CASES])
def test_a_dead_letter_is_always_made(args, expected):
    letter = _letter(*args)
    for key, value in expected.items():
        assert letter[key] == value, key
    assert letter["raw"]


def _operator_records(**functions):
    records = OperatorRecords(as_operator(lambda text: text, name="echo", **functions))
    records.open(FakeContext())
    return records


# (what, task_type function, a word of the warning)
TYPE_CASES = [
    ("a lone surrogate", lambda record: "kind-\ud800", "printable"),
    ("a control character", lambda record: "a\x00b", "printable"),
    ("an exception whose str() raises", lambda record: (_ for _ in ()).throw(Unprintable()),
     "str() raised"),
]


@pytest.mark.parametrize("task_type,word", [c[1:] for c in TYPE_CASES],
                         ids=[c[0] for c in TYPE_CASES])
def test_a_hostile_task_type_gives_the_default_type_and_a_warning_that_can_be_written(
        task_type, word, caplog):
    records = _operator_records(task_type=task_type)
    with caplog.at_level("WARNING", logger="pyflink_jobs.router_function"):
        task, record, *_ = records.read("record")
    assert (task.app_id, record) == ("echo", "record")
    assert records.descriptor_fallbacks["task_type"] == 1
    [warning] = caplog.records
    assert word in warning.getMessage()
    warning.getMessage().encode("utf-8")  # no lone surrogate reaches the log


def test_a_printable_type_of_any_script_still_passes():
    task, *_ = _operator_records(task_type=lambda record: "Übersetzung-翻訳").read("r")
    assert task.app_id == "Übersetzung-翻訳"


# (what, a Row-like value of TaskEventRecords)
ROW_CASES = [
    ("a text payload", ("not bytes", "t", 0, 0)),
    ("an int payload (bytes(n) would allocate n bytes)", (10 ** 12, "t", 0, 0)),
    ("a negative int payload", (-1, "t", 0, 0)),
    ("an infinite partition", (b"x", "t", float("inf"), 0)),
    ("a dict", {"payload": b"x"}),
]


@pytest.mark.parametrize("value", [c[1] for c in ROW_CASES], ids=[c[0] for c in ROW_CASES])
def test_a_malformed_row_of_task_events_is_refused_as_its_shape(value):
    records = TaskEventRecords()
    records.open(FakeContext())
    with pytest.raises(Refused) as refused:
        records.read(value)
    assert refused.value.stage == "shape"


class BrokenReader(OperatorRecords):
    """A reader with a bug of its own on some records."""

    def read(self, value):
        if value == "boom":
            raise RuntimeError("a bug in the reader")
        return super().read(value)


def test_a_reader_that_raises_gives_a_dead_letter_and_the_router_goes_on():
    from pyflink_jobs.router import RouterSettings
    from pyflink_jobs.router_function import RouterFunction
    function = RouterFunction(RouterSettings(nodes=NODES, policy="round_robin"),
                              BrokenReader(as_operator(lambda text: text, name="echo")))
    function.open(FakeContext())
    try:
        [dead] = list(function.process_element("boom", FakeContext()))
        letter = decode("DeadLetter", dead)
        assert letter["stage"] == "read" and "a bug in the reader" in letter["reason"]
        [(_, routed)] = list(function.process_element("fine", FakeContext()))
        assert routed.record == "fine"
        deep = []
        for _ in range(5000):   # nested past the recursion limit of repr and pickle
            deep = [deep]
        [dead] = list(function.process_element(deep, FakeContext()))
        assert decode("DeadLetter", dead)["raw"]
    finally:
        function.close()


@pytest.mark.parametrize("version", ["abc", float("nan"), {}, 1e300, 2 ** 60, -1, True],
                         ids=["text", "nan", "dict", "1e300", "2**60", "negative", "bool"])
def test_a_model_files_own_implausible_version_never_blocks_the_services_versions(
        tmp_path, version):
    from placement.ldwp.modelfile import load_model, save_model
    from pyflink_jobs.router import ModelRefresher, Router, RouterSettings
    _, agent = _agent(seed=1)
    agent.save(tmp_path / "v")
    layers, metadata = load_model(tmp_path / "v")
    save_model(tmp_path / "odd", layers, {**metadata, "version": version})
    router = Router(RouterSettings(nodes=NODES, policy="ldwp"), clock=FakeClock())
    router.install_model((tmp_path / "odd").read_bytes())   # an initial model, say
    assert router.model_version is None
    service = FakeService()
    service.versions[20] = (tmp_path / "v").read_bytes()
    assert ModelRefresher(router, service, interval_s=60.0).poll_once() is True
    assert router.model_version == 20


@pytest.mark.parametrize("latest", ["abc", 1e300, 2 ** 60, None], ids=str)
def test_an_implausible_latest_version_of_the_service_is_a_failed_poll(tmp_path, latest):
    from pyflink_jobs.router import ModelRefresher, Router, RouterSettings
    router = Router(RouterSettings(nodes=NODES, policy="ldwp"), clock=FakeClock())
    service = FakeService()
    service.latest = lambda: {"version": latest}
    refresher = ModelRefresher(router, service, interval_s=60.0)
    assert refresher.poll_once() is False
    assert refresher.failures == 1 and router.model_version is None


def test_a_version_whose_file_a_loader_chokes_on_is_refused_once(tmp_path):
    from pyflink_jobs.router import ModelRefresher, Router, RouterSettings
    router = Router(RouterSettings(nodes=NODES, policy="ldwp"), clock=FakeClock())
    service = FakeService()
    service.versions[3] = b"junk"
    downloads = []
    service.download = lambda v: downloads.append(v) or service.versions[v]
    refresher = ModelRefresher(router, service, interval_s=60.0)
    assert refresher.poll_once() is False and refresher.poll_once() is False
    assert downloads == [3] and refresher.refused == 1 and 3 in refresher.refused_versions


def test_feedback_of_nodes_outside_the_job_is_not_kept_in_broadcast_state():
    from pyflink_jobs.router import RouterSettings
    from pyflink_jobs.router_function import RouterFunction
    from test_router import feedback

    class State(dict):
        def put(self, key, value):
            self[key] = value

    state = State()

    class Context(FakeContext):
        def get_broadcast_state(self, descriptor):
            return state

    function = RouterFunction(RouterSettings(nodes=NODES, policy="round_robin"))
    function.open(FakeContext())
    try:
        for node in ["tm_a"] + [f"ghost-{i}" for i in range(50)]:
            function.process_broadcast_element(encode("NodeFeedback", feedback(node)),
                                               Context())
    finally:
        function.close()
    assert list(state) == ["tm_a"] and function.router.feedback_records == 51


def test_a_flood_of_unknown_writer_fingerprints_is_counted_in_bounded_memory():
    import os

    from workload.codec import HEADER_SIZE, MARKER, MAX_UNKNOWN_FINGERPRINTS, Codec
    event = {"task_id": "t", "app_id": "a", "input_size": 1, "submitted_at_ms": 0}
    body = encode("TaskEvent", event)[HEADER_SIZE:]
    codec = Codec()
    floods = MAX_UNKNOWN_FINGERPRINTS + 500
    for _ in range(floods):   # a new random fingerprint every message
        assert codec.decode("TaskEvent", MARKER + os.urandom(8) + body)["task_id"] == "t"
    assert codec.unknown_writer_reads == floods
    assert len(codec.unknown_writer_fingerprints) <= MAX_UNKNOWN_FINGERPRINTS + 1
    assert sum(codec.unknown_writer_fingerprints.values()) == floods
