"""The check of a user operator's outputs against the job's output_type (pyflink_jobs.output_fit):
it refuses exactly what PyFlink's Python worker would fail the job on, and nothing else."""

from __future__ import annotations

import pickle
from decimal import Decimal

import pytest

from pyflink_jobs.output_fit import NoneOutput, OutputFit, OutputMisfit, worker_type_proto

pyflink_common = pytest.importorskip("pyflink.common")
Types, Row = pyflink_common.Types, pyflink_common.Row


def _types():
    return {
        "long": Types.LONG(), "int": Types.INT(), "double": Types.DOUBLE(),
        "boolean": Types.BOOLEAN(), "string": Types.STRING(),
        "bytes": Types.PRIMITIVE_ARRAY(Types.BYTE()),
        "row": Types.ROW_NAMED(["id", "score"], [Types.INT(), Types.DOUBLE()]),
        "tuple": Types.TUPLE([Types.STRING(), Types.INT()]),
        "list": Types.LIST(Types.STRING()),
        "map": Types.MAP(Types.STRING(), Types.INT()),
        "decimal": Types.BIG_DEC(),
    }


#: (type, output, fits): what PyFlink's worker coder makes of it (a plain map with this
#: output_type fails the job on the ones that do not fit)
SCENARIOS = [
    ("long", 3, True), ("long", -2**63, True), ("long", "3", False), ("long", 2.5, True),   # the coder truncates a float, as a plain map
    ("long", 2**64, False),
    ("int", 7, True), ("int", "seven", False),
    ("double", 0.5, True), ("double", 2, True), ("double", float("nan"), True),
    ("double", "0.5", False),
    ("string", "plain ascii", True), ("string", "héllo ✓", True), ("string", 5, False),
    ("string", "lone \ud800 surrogate", False),
    ("bytes", b"\x00\xff", True), ("bytes", "text", False),
    ("row", Row(id=1, score=2.0), True), ("row", Row(id="x", score=1.0), False),
    ("tuple", ("a", 1), True), ("tuple", ("a", "b"), False),
    ("list", ["a", "b"], True), ("list", [1, 2], False),
    ("map", {"a": 1}, True), ("map", {"a": "one"}, False),
    ("decimal", Decimal("1.5"), True),
]


@pytest.mark.parametrize("type_name, output, fits", SCENARIOS)
def test_an_output_fits_exactly_when_the_workers_coder_encodes_it(type_name, output, fits):
    fit = OutputFit.for_output_type(_types()[type_name])
    assert fit.proto is not None   # asked of Flink's Java side, as the worker's coder is
    reason = fit.problem(output)
    assert (reason is None) == fits, reason
    if not fits:
        assert "does not fit the job's output_type" in reason
        with pytest.raises(OutputMisfit):
            fit.check(output)
    else:
        assert fit.check(output) is output


def test_the_check_uses_the_workers_coder_where_pythons_own_differs():
    """Types.LIST: the worker codes it as a primitive array, Python's from_type_info as a
    generic one (which takes a None element): the worker's answer is the one that counts."""
    from pyflink.fn_execution import flink_fn_execution_pb2
    from pyflink.fn_execution.coders import from_type_info_proto
    proto = worker_type_proto(Types.LIST(Types.STRING()))
    coder = from_type_info_proto(flink_fn_execution_pb2.TypeInfo.FromString(proto))
    assert type(coder).__name__ == "PrimitiveArrayCoder"


@pytest.mark.parametrize("output_type, carries", [
    (Types.STRING(), True), (Types.LONG(), False), (Types.PICKLED_BYTE_ARRAY(), False)])
def test_none_fits_only_a_string(output_type, carries):
    fit = OutputFit.for_output_type(output_type)
    assert (fit.problem(None) is None) == carries
    if not carries:
        with pytest.raises(NoneOutput):
            fit.check(None)


def test_pickled_outputs_and_thread_mode_check_only_none():
    unpicklable = lambda: 1   # noqa: E731 - cloudpickle in the worker takes it
    for fit in (OutputFit.for_output_type(Types.PICKLED_BYTE_ARRAY()),
                OutputFit.for_output_type(Types.LONG(), python_mode="thread")):
        assert fit.proto is None
        assert fit.problem(unpicklable) is None and fit.problem("x") is None
        assert fit.problem(None) is not None


def test_it_travels_to_the_workers_and_builds_its_coder_there():
    fit = OutputFit.for_output_type(_types()["row"])
    assert fit.problem(Row(id=1, score=1.0)) is None          # the coder is built and used
    copy = pickle.loads(pickle.dumps(fit))
    assert copy._impl is None and copy.proto == fit.proto     # built again where it lands
    assert copy.problem(Row(id="no", score=1.0)) is not None


def test_a_proto_no_coder_can_read_checks_only_none():
    fit = OutputFit(b"\xff\xff not a proto", carries_none=False, type_text="odd")
    assert fit.problem("anything") is None and fit.problem(12) is None
    assert fit.problem(None) is not None


def test_a_huge_output_is_named_briefly_in_the_reason():
    reason = OutputFit.for_output_type(Types.LONG()).problem("x" * 1_000_000)
    assert reason is not None and len(reason) < 400


def test_a_text_map_is_checked_on_its_fast_path_too():
    fit = OutputFit.for_output_type(Types.STRING())
    call = fit.checking(lambda r: r, flat=False)
    assert call("plain") == "plain" and call("héllo") == "héllo" and call(None) is None
    with pytest.raises(OutputMisfit):
        call("bad \udc80")
    with pytest.raises(OutputMisfit):
        call(12)
