"""The documentation site builds with no warning, and its generated pages are current."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def generator() -> ModuleType:
    path = ROOT / "docs" / "gen" / "reference.py"
    spec = importlib.util.spec_from_file_location("docs_gen_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_reference_pages_are_current() -> None:
    stale = generator().stale_pages()
    assert not stale, f"stale: {stale}; run: python docs/gen/reference.py"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """`mkdocs build --strict`: a broken link, a missing anchor, a page left out of the
    navigation or an unknown option fails the build."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "architecture" / "index.html").is_file()
    assert (tmp_path / "reference" / "generated" / "cli" / "index.html").is_file()


def test_the_readme_is_a_landing_page() -> None:
    """Short, with the two set-up lines CI runs exactly as written, pointing at docs/."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    assert (
        "python3 -m venv .venv && .venv/bin/pip install -e '.[embedded]' "
        "&& .venv/bin/effect-broker up --demo\n"
        "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' "
        "&& .venv/bin/pytest\n"
    ) in readme
    for page in ("docs/tutorial.md", "docs/architecture.md", "docs/decisions/index.md"):
        assert f"({page})" in readme, page
