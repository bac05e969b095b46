"""Every ``python -m MODULE`` command the documentation quotes (README.md, each model card, bench/README.md) names a
module that runs: ``python -m MODULE --help`` exits 0 and prints its usage. Each module is run once."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted(ROOT.glob("pretrained/*/README.md"))]
COMMAND = re.compile(r"python3? -m ([A-Za-z_][\w.]*)")


def quoted_modules() -> dict[str, list[str]]:
    """Module name -> the documents (relative paths) that quote ``python -m`` with it."""
    found: dict[str, list[str]] = {}
    for doc in DOCS:
        for module in COMMAND.findall(doc.read_text(encoding="utf-8")):
            found.setdefault(module.rstrip("."), []).append(str(doc.relative_to(ROOT)))
    return found


MODULES = quoted_modules()


def test_the_documents_quote_the_training_and_recipe_commands():
    """The regular expression finds what the documents hold (else the test below would check nothing)."""
    assert {"training.train", "training.evaluate", "training.recipe"} <= MODULES.keys()
    assert all(doc in {str(d.relative_to(ROOT)) for d in DOCS} for docs in MODULES.values() for doc in docs)


@pytest.mark.slow
@pytest.mark.parametrize("module", sorted(MODULES))
def test_each_quoted_module_runs_with_help(module):
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"python -m {module} --help (quoted in {MODULES[module]}): {done.stderr[-2000:]}"
    assert "usage" in done.stdout.lower(), done.stdout[:500]
