"""Docs show example files exactly: a fenced block right after ``<!-- example: PATH -->`` must be
the file at PATH (relative to the repository), byte for byte, so the docs cannot drift from
the examples the tests run (``tests/frontdoor/test_sidecar_examples.py``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A marker is a line of its own (a mention inside a sentence is not one).
MARKED = re.compile(r"^<!-- example: (\S+) -->\n```[\w-]*\n(.*?)^```$", re.DOTALL | re.MULTILINE)
MARKER = re.compile(r"^<!-- example: (\S+) -->$", re.MULTILINE)
SIDECAR = ROOT / "examples" / "sidecar"


def shown(doc: Path) -> dict[str, str]:
    """path -> the block shown for it in ``doc``; every marker must head a fenced block."""
    text = doc.read_text()
    blocks = {m.group(1): m.group(2) for m in MARKED.finditer(text)}
    markers = MARKER.findall(text)
    assert sorted(markers) == sorted(blocks), f"{doc}: a marker without a block right after it"
    assert len(markers) == len(set(markers)), f"{doc}: a file shown twice"
    return blocks


def test_marked_blocks_are_the_example_files() -> None:
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for path, block in shown(doc).items():
            file = ROOT / path
            assert file.is_file(), f"{doc.name} shows {path}, which does not exist"
            assert block == file.read_text(), f"{doc.name}: the block for {path} differs from it"


def test_the_frontdoor_sidecar_section_shows_every_sidecar_example_file() -> None:
    files = {
        str(p.relative_to(ROOT))
        for p in SIDECAR.iterdir()
        if p.is_file() and p.suffix in (".py", ".yaml", ".csv")
    }
    names = ("fastapi_app.py", "starlette_app.py", "flowcontrol.yaml", "tokens.csv")
    assert files >= {f"examples/sidecar/{name}" for name in names}
    assert set(shown(ROOT / "docs" / "frontdoor.md")) == files
