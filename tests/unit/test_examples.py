"""The examples are the hook's documentation: the hooked job differs from the plain one by the
hook's three lines (plus its docstring), and both parse."""

from __future__ import annotations

import ast
import difflib
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _code_lines(name):
    tree = ast.parse((EXAMPLES / name).read_text())
    # drop the module docstring: it names the file and how to run it
    body = tree.body[1:] if isinstance(tree.body[0], ast.Expr) else tree.body
    return ast.unparse(ast.Module(body=body, type_ignores=[])).splitlines()


def test_the_hooked_job_is_the_plain_job_plus_three_lines():
    diff = [line for line in difflib.unified_diff(_code_lines("plain_job.py"),
                                                  _code_lines("hooked_job.py"), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    added = [line[1:].strip() for line in diff if line.startswith("+")]
    removed = [line[1:].strip() for line in diff if line.startswith("-")]
    assert len(added) <= 3 and len(removed) == 1, diff
    assert added[0] == "from pyflink_jobs.hook import StreamplaceHook"
    assert added[-1] == "results = hook.apply(env, tasks)"
    assert removed[0].startswith("results = tasks.map(RunTask()")
