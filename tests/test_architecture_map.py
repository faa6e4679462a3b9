"""docs/architecture.md is the map of record: it names every module of the package."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "apikey_tui"


def test_the_architecture_page_names_every_module() -> None:
    """Each module's file name (or, for a migration revision, the migrations folder) appears on
    the page: a module added without a line on the map fails here."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    missing = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        if "versions" not in path.parts and path.name != "__init__.py" and path.name not in page
    ]
    assert missing == [], f"docs/architecture.md does not mention: {missing}"
