"""The dependency direction of ARCHITECTURE.md holds: no package imports one above it.

``workload`` <- ``simulator`` <- ``placement``, ``interference`` (siblings: they may import each
other) <- ``pyflink_jobs`` <- ``streamplace``. Every ``.py`` file of the five lower packages is
parsed with ``ast``; every import counts, at module level or inside a function (a lazy import
still makes the lower package need the upper one). ``streamplace`` may import anything;
``benchmarks/`` and ``tests/`` are outside the chain.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Height of each package in the chain; a file may import packages of its height or lower.
LEVEL = {"workload": 0, "simulator": 1, "placement": 2, "interference": 2, "pyflink_jobs": 3,
         "streamplace": 4}
CHECKED = ("workload", "simulator", "placement", "interference", "pyflink_jobs")

#: "file:imported module" -> why it may reach up. Empty: there is no exception today; a new one
#: needs a one-line reason here.
EXEMPT: dict[str, str] = {}


def upward_imports(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path`` of a package above ``package``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):  # walk: function- and class-level imports too
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        else:
            continue  # relative imports stay inside their package
        for module in modules:
            top = module.split(".")[0]
            if LEVEL.get(top, -1) > LEVEL[package]:
                found.append((node.lineno, module))
    return sorted(found)  # ast.walk is breadth-first; report in line order


def violations(root: Path = ROOT) -> list[str]:
    """``file:line imports module`` for every upward import below ``root``, not exempted."""
    out = []
    for package in CHECKED:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            for line, module in upward_imports(path, package):
                if f"{rel}:{module}" not in EXEMPT:
                    out.append(f"{rel}:{line} imports {module} ({package} may not import "
                               f"{module.split('.')[0]})")
    return out


def test_no_package_imports_one_above_it():
    found = violations()
    assert found == [], "imports against the dependency direction:\n" + "\n".join(found)


def test_every_exemption_is_still_needed():
    # A stale exemption would silently allow the next upward import from that file.
    needed = set()
    for package in CHECKED:
        for path in (ROOT / package).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            needed |= {f"{rel}:{module}" for _, module in upward_imports(path, package)}
    assert set(EXEMPT) <= needed, sorted(set(EXEMPT) - needed)


@pytest.mark.parametrize("package,source,expected", [
    ("workload", "import simulator\n", ["simulator"]),
    ("simulator", "def f():\n    from placement.policies import make_policy\n",
     ["placement.policies"]),
    ("placement", "from interference.stdm import STDM\n", []),       # siblings
    ("interference", "import placement.speed\n", []),                  # siblings
    ("placement", "class A:\n    def m(self):\n        import pyflink_jobs.hook\n",
     ["pyflink_jobs.hook"]),
    ("pyflink_jobs", "from streamplace.cluster_spec import load_cluster_spec\n",
     ["streamplace.cluster_spec"]),
    ("pyflink_jobs", "from workload.cluster_spec import load_cluster_spec\nimport json\n", []),
    ("workload", "from . import model\nimport streamplacex\n", []),   # relative; other name
])
def test_the_checker_finds_module_and_function_level_imports(tmp_path, package, source,
                                                              expected):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert [module for _, module in upward_imports(path, package)] == expected


def test_the_checker_names_file_and_line(tmp_path):
    (tmp_path / "workload").mkdir()
    (tmp_path / "workload" / "bad.py").write_text("import os\n\ndef f():\n    import streamplace\n")
    for package in CHECKED[1:]:
        (tmp_path / package).mkdir()
    assert violations(tmp_path) == [
        "workload/bad.py:4 imports streamplace (workload may not import streamplace)"]
