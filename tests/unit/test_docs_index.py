"""The user documentation hangs together: docs/index.md lists every page of docs/ and the
deployment guide, and every relative link in docs/*.md and README.md leads to a file that
exists. Links are read as a reader would follow them: code blocks and code spans are not
links, and a link's #fragment or ?query is not part of the file it names."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
INDEX = DOCS / "index.md"
#: Pages that live outside docs/ and that the index must still list.
LISTED_ELSEWHERE = (ROOT / "deploy" / "README.md",)

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,}).*?^[ \t]*\1", re.S | re.M)
_CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1", re.S)
_INLINE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
_REFERENCE = re.compile(r"^[ \t]{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def relative_links(path: Path) -> list[str]:
    """The files ``path`` links to by relative path, in order, as written (decoded)."""
    text = _CODE_SPAN.sub("", _FENCE.sub("", path.read_text(encoding="utf-8")))
    targets = _INLINE.findall(text) + _REFERENCE.findall(text)
    files = []
    for target in targets:
        if _SCHEME.match(target) or target.startswith(("#", "//")):
            continue
        target = re.split(r"[#?]", target, maxsplit=1)[0]
        if target:
            files.append(unquote(target))
    return files


def linked_files(path: Path) -> set[Path]:
    return {(path.parent / target).resolve() for target in relative_links(path)}


def checked_pages() -> list[Path]:
    return [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]


def test_the_index_lists_every_page():
    listed = linked_files(INDEX)
    pages = [page for page in [*DOCS.glob("*.md"), *LISTED_ELSEWHERE] if page != INDEX]
    unlisted = sorted(str(page.relative_to(ROOT)) for page in pages
                      if page.resolve() not in listed)
    assert unlisted == [], f"docs/index.md does not list {', '.join(unlisted)}"


@pytest.mark.parametrize("page", checked_pages(), ids=lambda page: str(page.relative_to(ROOT)))
def test_relative_links_lead_to_files_that_exist(page: Path):
    broken = sorted({target for target in relative_links(page)
                     if not (page.parent / target).exists()})
    assert broken == [], f"{page.relative_to(ROOT)} links to missing files: {', '.join(broken)}"


def test_links_are_found_as_a_reader_follows_them(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text(
        "See [the guide](guide.md#setup) and ![a picture](img/a%20b.png \"title\").\n"
        "Not links: `[x](in-span.md)`, <https://example.org>, [web](https://example.org/a.md),\n"
        "[here](#section), [mail](mailto:a@example.org).\n"
        "\n"
        "```python\n"
        "print('[x](in-fence.md)')\n"
        "```\n"
        "\n"
        "[ref]: ../deploy/README.md\n",
        encoding="utf-8",
    )
    assert relative_links(page) == ["guide.md", "img/a b.png", "../deploy/README.md"]
