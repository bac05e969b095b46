"""The project's files describe the project as it is now, at a size a reader takes in (history lives in git).

README.md and bench/README.md stay within 300 lines, each model card within 250 (with the Hugging Face model card's
YAML metadata first), and no tracked text file names a work session, a loan of a GPU, or the date and hour of a run.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CARDS = sorted(ROOT.glob("pretrained/*/README.md"))
LIMITS = {ROOT / "README.md": 300, ROOT / "bench" / "README.md": 300} | {card: 250 for card in CARDS}
DIARY = re.compile(
    r"\bsession \d+\b|\bsessions \d+\s*[–-]\s*\d+\b|\bthis session's task\b|\bGPU (?:was )?lent\b|\bloan of a GPU\b"
    r"|\b20\d\d-\d\d-\d\d[ T]\d\d:\d\d\b|\b\d\d:\d\d(?:[–-]\d\d:\d\d)? UTC\b|\bsame host\b",
    re.IGNORECASE,
)


@pytest.mark.parametrize("path", sorted(LIMITS), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_document_stays_within_its_length(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= LIMITS[path], f"{path.relative_to(ROOT)}: {lines} lines, at most {LIMITS[path]}"


@pytest.mark.parametrize("card", CARDS, ids=lambda p: p.parent.name)
def test_each_model_card_opens_with_hugging_face_metadata(card):
    text = card.read_text(encoding="utf-8")
    assert text.startswith("---\n"), "a model card opens with YAML metadata"
    meta = text.split("---\n", 2)[1]
    for field in ("language:", "license:", "datasets:", "metrics:"):
        assert field in meta, f"{card.parent.name}: {field} missing from the card's metadata"


def tracked_text_files() -> list[Path]:
    try:
        names = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"git is not available: {e}")
    suffixes = {".md", ".py", ".toml", ".yaml", ".yml", ".conf", ".txt", ".cfg", ".po"}
    return [ROOT / n for n in names.splitlines() if Path(n).suffix in suffixes or Path(n).name in ("Dockerfile", "run")]


def test_no_file_reads_like_a_lab_notebook():
    # The pattern must catch what it is for; the samples are assembled here so that this file holds no such line.
    loan, hours, numbered = "No GPU was " + "lent", "09:50–12:50 " + "UTC", "session " + "32"
    assert all(DIARY.search(sample) for sample in (loan, hours, numbered)) and not DIARY.search("this browser session")
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}"
        for path in tracked_text_files()
        if path.is_file() and path != Path(__file__).resolve()
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if DIARY.search(line)
    ]
    assert found == [], "\n".join(found)
