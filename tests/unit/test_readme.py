"""Every file, folder and image the README and its results pages point at exists in the
repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Paths the README names that exist in the built wheel, not in the checkout.
WHEEL_ONLY = {"streamplace/_kafka"}  # kafka/ force-included by hatch (pyproject.toml)
TOP = ("streamplace", "placement", "interference", "workload", "simulator", "pyflink_jobs",
       "kafka", "docker", "benchmarks", "examples", "tests", "docs")


def referenced_paths(text: str) -> set[str]:
    paths = set(re.findall(r"!?\[[^\]]*\]\(([^)#\s]+)\)", text))       # links and images
    for code in re.findall(r"`([^`\n]+)`", text):                        # inline code
        for token in code.split():
            token = token.strip("(),;:")
            if token.split("/")[0] in TOP and "/" in token and "<" not in token \
                    and "*" not in token:
                paths.add(token)
    return {p for p in paths if not p.startswith(("http://", "https://", "mailto:"))}


def test_readme_references_exist():
    text = (ROOT / "README.md").read_text()
    paths = referenced_paths(text)
    assert len(paths) > 20, sorted(paths)  # the parser really finds the references
    missing = sorted(p for p in paths - WHEEL_ONLY if not (ROOT / p.rstrip("/")).exists())
    assert missing == [], f"README points at files that do not exist: {missing}"


#: The pages the README's measured record moved to (2026-12-07); they name result files, models
#: and commands as the README did, with paths from the repository's root.
RESULT_PAGES = ("docs/results-engines.md", "docs/results-simulator.md")


def test_results_pages_references_exist_and_the_readme_links_them():
    readme = (ROOT / "README.md").read_text()
    for page in RESULT_PAGES:
        assert f"]({page})" in readme, f"the README does not link {page}"
        paths = referenced_paths((ROOT / page).read_text())
        assert len(paths) > 20, (page, sorted(paths))
        missing = sorted(p for p in paths - WHEEL_ONLY if not (ROOT / p.rstrip("/")).exists())
        assert missing == [], f"{page} points at files that do not exist: {missing}"


def test_the_parser_catches_a_missing_file():
    assert referenced_paths("see `docs/nothing-here.md` and ![x](benchmarks/results/x.png)") == \
        {"docs/nothing-here.md", "benchmarks/results/x.png"}


def test_readme_configuration_reference_matches_the_code():
    from streamplace.config import config_reference
    text = (ROOT / "README.md").read_text()
    block = text.split("<!-- config-reference:start -->\n")[1].split(
        "\n<!-- config-reference:end -->")[0]
    assert block.strip() == config_reference().strip(), \
        "README's configuration reference is stale: paste `streamplace config --reference`"
