"""The examples are the hook's documentation: each hooked job differs from its plain job by the
hook's three lines (plus its docstring), and both parse."""

from __future__ import annotations

import ast
import difflib
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

#: (plain, hooked, the plain job's line the hook replaces, the hook's line)
PAIRS = [
    ("plain_job.py", "hooked_job.py", "results = tasks.map(RunTask()",
     "results = hook.apply(env, tasks)"),
    ("json_enrich/plain_job.py", "json_enrich/hooked_job.py",
     "enriched = orders.map(enrich, output_type=Types.STRING())",
     "enriched = hook.apply(env, orders, enrich, output_type=Types.STRING())"),
    ("text_inference/plain_job.py", "text_inference/hooked_job.py",
     "topics = reviews.map(Classify(), output_type=Types.STRING())",
     "topics = hook.apply(env, reviews, [tokenize, TextNet, to_label], "
     "output_type=Types.STRING())"),
    ("async_scoring/plain_job.py", "async_scoring/hooked_job.py",
     "scores = AsyncDataStream.unordered_wait(reviews, ScoreReview()",
     "scores = hook.apply(env, reviews, ScoreReview(), output_type=Types.STRING())"),
    ("video_analytics/plain_job.py", "video_analytics/hooked_job.py",
     "answers = clips.map(AnalyseClip(), output_type=Types.STRING())",
     "answers = hook.apply(env, clips, AnalyseClip(), output_type=Types.STRING(), "
     "task_type=application)"),
]


def _code_lines(name):
    tree = ast.parse((EXAMPLES / name).read_text())
    # drop the module docstring: it names the file and how to run it
    body = tree.body[1:] if isinstance(tree.body[0], ast.Expr) else tree.body
    return ast.unparse(ast.Module(body=body, type_ignores=[])).splitlines()


@pytest.mark.parametrize("plain,hooked,replaced,hook_line", PAIRS,
                         ids=[p[1].split("/")[0] for p in PAIRS])
def test_the_hooked_job_is_the_plain_job_plus_three_lines(plain, hooked, replaced, hook_line):
    diff = [line for line in difflib.unified_diff(_code_lines(plain), _code_lines(hooked),
                                                  lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    added = [line[1:].strip() for line in diff if line.startswith("+")]
    removed = [line[1:].strip() for line in diff if line.startswith("-")]
    assert len(added) <= 3 and len(removed) == 1, diff
    assert added[0] == "from pyflink_jobs.hook import StreamplaceHook"
    assert added[-1] == hook_line
    assert removed[0].startswith(replaced)


def test_every_example_pair_is_listed():
    hooked = sorted(str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("hooked_job.py"))
    assert hooked == sorted(p[1] for p in PAIRS)
