"""DeadLetterLog: a job without a dead-letter topic still reads its dead letters (PyFlink fails
an operator whose side output nobody reads), logs them with their stage and reason, bounded,
and emits nothing."""

from __future__ import annotations

import logging

from pyflink_jobs.flink_ops import DeadLetterLog, make_dead_letter


def _letter(i: int) -> bytes:
    return make_dead_letter(b"raw", "orders", 0, i, f"stage 'enrich' failed\nTraceback ...\n"
                            f"KeyError: 'items' ({i})", "operator:enrich")


def test_each_dead_letter_is_logged_with_stage_and_reason_and_nothing_is_emitted(caplog):
    log = DeadLetterLog()
    with caplog.at_level(logging.WARNING, logger="streamplace.dead_letters"):
        assert log(_letter(1)) == []
    (record,) = caplog.records
    assert "operator:enrich" in record.getMessage()
    assert "stage 'enrich' failed" in record.getMessage()
    assert "KeyError: 'items' (1)" in record.getMessage()   # the error, from the last line


def test_logging_is_bounded_first_ones_then_every_hundredth(caplog):
    log = DeadLetterLog()
    with caplog.at_level(logging.WARNING, logger="streamplace.dead_letters"):
        for i in range(1, 301):
            assert log(_letter(i)) == []
    counts = [int(r.getMessage().split()[2]) for r in caplog.records]
    assert counts == list(range(1, DeadLetterLog.FIRST + 1)) + [100, 200, 300]


def test_an_undecodable_dead_letter_is_logged_as_such(caplog):
    with caplog.at_level(logging.WARNING, logger="streamplace.dead_letters"):
        assert DeadLetterLog()(b"\xff\x00 not avro") == []
    assert "undecodable" in caplog.records[0].getMessage()


def test_the_job_readers_fall_back_to_flinks_defaults_without_a_jvm():
    from pyflink_jobs.flink_ops import (disable_python_chaining, execution_target,
                                        input_is_bounded, runtime_mode)

    stand_in = object()
    assert input_is_bounded(stand_in) is False      # unknown: keep the feedback unbounded
    assert runtime_mode(stand_in) == "STREAMING"
    assert execution_target(stand_in) == ""          # not "local": pin as on a cluster
    assert disable_python_chaining(stand_in) is None  # nothing to change, no error
