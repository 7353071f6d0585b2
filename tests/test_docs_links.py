"""Every relative link and image of README.md and docs/ points at a file of the repository, and every `#anchor`
at a heading of its target (GitHub's heading ids). Links to the web (http, https, mailto) are not followed."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.S | re.M)  # fenced code blocks
CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.S)
# [text](target) and ![alt](target), a title after the target allowed; one level of brackets inside the text
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+[\"'(][^)]*)?\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)  # [label]: target
HTML = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)=[\"']([^\"']+)[\"']", re.I)
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # http:, https:, mailto:, ...


def _prose(text: str) -> str:
    """The text without its code: fenced blocks dropped, code spans kept as plain words (so a link whose text
    is code, [`x`](y), still counts, and brackets inside code never look like links)."""
    text = FENCE.sub("", text)
    return CODE_SPAN.sub(lambda m: m.group(0).strip("`").replace("[", "(").replace("]", ")"), text)


def links(text: str) -> list[str]:
    """Every link and image target of a Markdown text, outside code."""
    prose = _prose(text)
    return [m.group(1) for pattern in (INLINE, REFERENCE, HTML) for m in pattern.finditer(prose)]


def slug(heading: str) -> str:
    """GitHub's id for a heading: its text without markup, lower-cased, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link or image: its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    kept = (c for c in text if c.isalnum() or c in "-_ " or unicodedata.category(c).startswith("M"))
    return "".join(kept).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The ids of a page's headings (outside code), a repeated one numbered -1, -2, ... as GitHub does."""
    seen: dict[str, int] = {}
    out = set()
    for m in HEADING.finditer(FENCE.sub("", text)):
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken(page: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with the relative links of `page`: a missing file, a path outside the repository, an
    anchor that no heading of the target Markdown page has."""
    problems = []
    for target in links(page.read_text()):
        if not target or EXTERNAL.match(target):
            continue
        path_part, _, anchor = target.partition("#")
        path = (page.parent / unquote(path_part)).resolve() if path_part else page
        if not path.is_relative_to(root.resolve()):
            problems.append(f"{target}: outside the repository (it does not resolve on GitHub or in a copy)")
        elif not path.exists():
            problems.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and unquote(anchor).lower() not in anchors(path.read_text()):
            problems.append(f"{target}: {path.name} has no heading #{anchor}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert broken(page) == []


def test_the_pages_are_found_and_link_somewhere():
    assert len(PAGES) > 5 and sum(len(links(p.read_text())) for p in PAGES) > 20


def test_slugs_follow_github():
    assert slug("Encoder-decoder models: T5 and FLAN-T5") == "encoder-decoder-models-t5-and-flan-t5"
    assert slug("Too big for one GPU: `--distributed`") == "too-big-for-one-gpu---distributed"
    assert slug("Speed: `python -m nirvana bench scale`") == "speed-python--m-nirvana-bench-scale"
    assert slug("Does NIRVANA win? Quality on SmolLM2-135M") == "does-nirvana-win-quality-on-smollm2-135m"
    assert anchors("# A\n## A\n```\n# A\n```\n## A\n") == {"a", "a-1", "a-2"}


def test_a_broken_link_is_caught(tmp_path):
    """The check can fail: a missing file, a missing anchor, a path out of the repository; code and the web are
    left alone."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "B.md").write_text("# B\n\n## Real heading\n")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/B.md#real-heading) ![img](docs/B.md) [web](https://example.org/x.md) [self](#top)\n"
        "# Top\n\n`[not a link](nowhere.md)`\n\n```\n[nor this](nowhere.md)\n```\n"
        "[gone](docs/C.md) [bad anchor](docs/B.md#no-such) [out](../shared/docs/METHOD.md)\n[ref]: missing.png\n"
    )
    problems = broken(page, tmp_path)
    assert [p.split(":")[0] for p in problems] == [
        "docs/C.md",
        "docs/B.md#no-such",
        "../shared/docs/METHOD.md",
        "missing.png",
    ], problems
