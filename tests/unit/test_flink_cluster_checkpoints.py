"""Which checkpoint a restart resumes from: the REST body's newest, or the newest retained
checkpoint folder on disk (scenario tables; no cluster needed)."""

from __future__ import annotations

import pytest

from streamplace.flink_cluster import newest_checkpoint_path, newest_retained_checkpoint


@pytest.mark.parametrize("body, expected", [
    ({}, None),
    ({"latest": None}, None),
    ({"latest": {"completed": None, "savepoint": None}}, None),
    ({"latest": {"completed": {"latest_ack_timestamp": 5, "external_path": "file:/c"}}},
     "file:/c"),
    ({"latest": {"completed": {"latest_ack_timestamp": 5, "external_path": "file:/c"},
                 "savepoint": {"latest_ack_timestamp": 9, "external_path": "file:/s"}}},
     "file:/s"),
    ({"latest": {"completed": {"latest_ack_timestamp": 9, "external_path": "file:/c"},
                 "savepoint": {"latest_ack_timestamp": 5, "external_path": "file:/s"}}},
     "file:/c"),
])
def test_the_newest_of_checkpoint_and_savepoint_wins(body, expected):
    assert newest_checkpoint_path(body) == expected


def test_the_highest_complete_checkpoint_folder_wins(tmp_path):
    assert newest_retained_checkpoint(tmp_path / "missing") is None
    for name, complete in (("chk-2", True), ("chk-10", True), ("chk-11", False),
                           ("chk-x", True), ("shared", True)):
        (tmp_path / name).mkdir()
        if complete:
            (tmp_path / name / "_metadata").write_bytes(b"m")
    # chk-11 has no _metadata (still being written), chk-x is not a number: chk-10, not chk-2
    assert newest_retained_checkpoint(tmp_path) == (tmp_path / "chk-10").as_uri()
