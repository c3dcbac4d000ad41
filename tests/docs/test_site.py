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
    """Short, opening with its two set-up lines (CI runs them as written: this test
    leaves their exact text to CI), and pointing into docs/."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    opening = readme.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert len(opening) == 2
    assert opening[0].endswith("effect-broker up --demo")
    assert opening[1].startswith("python3 -m venv") and "pytest" in opening[1]
    for page in ("docs/tutorial.md", "docs/architecture.md", "docs/decisions/index.md"):
        assert f"({page})" in readme, page
