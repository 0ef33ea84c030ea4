"""The dashboard's renderer, exactly: which links the sanitizer keeps and which it leaves
as Markdown source, raw HTML and pictures shown as text, tables, the frontmatter split,
and the usage chart's SVG to the number."""

from __future__ import annotations

import pytest

from orchestrator.dashboard import render
from orchestrator.dashboard.render import Bar, _markdown, bar_chart, render_markdown


@pytest.fixture(autouse=True)
def _a_parser_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test renders with a parser configured afresh, not one an earlier test made."""
    monkeypatch.setattr(render, "_MD", None)


def kept(url: str) -> bool:
    """Whether a link to ``url`` is rendered as a link (markdown-it hands the sanitizer the
    normalized URL, as it does for every link, autolink and reference)."""
    md = _markdown()
    return md.validateLink(md.normalizeLink(url))


@pytest.mark.parametrize(
    "url",
    [
        "http://example.org/a",
        "https://example.org/a?b=1",
        "HTTPS://example.org",
        "mailto:a@example.org",
        "MAILTO:a@example.org",
        "/relative",
        "relative/page.md",
        "X//not-a-host",  # a path on this site: only a leading // or /\ leaves it
        "#top",
        "?q=1",
        "./a:b",
        "-//x",  # a path on this site: a leading "-" is no control character
        "-notes.md",
    ],
)
def test_links_to_the_web_to_mail_and_within_the_site_are_kept(url: str) -> None:
    assert kept(url) is True


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "JavaScript:alert(1)",
        "vbscript:msgbox",
        "data:text/html,x",
        "file:///etc/passwd",
        "ftp://example.org",
        "FTP://example.org",
        "Https:example.org",
        "a+b.c-d:x",
        "https:example.org",
        "http:/example.org",
        "http://",
        "https:///example.org",
        "//example.org",
        " //example.org",
    ],
)
def test_links_with_another_scheme_or_to_another_host_without_one_are_refused(url: str) -> None:
    assert kept(url) is False


def test_a_refused_link_stays_markdown_source_and_a_kept_one_is_a_link() -> None:
    body, front = render_markdown(
        "[a](http://example.org/a) [b](ftp://example.org/b) [c](mailto:c@example.org) "
        "[d](javascript:alert(1)) <https://example.org/e> <ftp://example.org/f>"
    )
    assert front is None
    assert body == (
        '<p><a href="http://example.org/a">a</a> [b](ftp://example.org/b) '
        '<a href="mailto:c@example.org">c</a> [d](javascript:alert(1)) '
        '<a href="https://example.org/e">https://example.org/e</a> '
        "&lt;ftp://example.org/f&gt;</p>\n"
    )


def test_a_reference_link_is_checked_as_an_inline_one() -> None:
    assert render_markdown("[r]: https://example.org/r\n\n[r]")[0] == (
        '<p><a href="https://example.org/r">r</a></p>\n'
    )
    assert render_markdown("[r]: javascript:alert(1)\n\n[r]")[0] == (
        "<p>[r]: javascript:alert(1)</p>\n<p>[r]</p>\n"
    )


def test_raw_html_is_text_and_a_picture_is_never_fetched() -> None:
    body, _ = render_markdown('<script>alert(1)</script>\n\n<b onclick="x">b</b>')
    assert body == (
        "<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>\n"
        "<p>&lt;b onclick=&quot;x&quot;&gt;b&lt;/b&gt;</p>\n"
    )
    # no <img>: the picture's link is an ordinary link, after a "!"
    body, _ = render_markdown("![pixel](https://example.org/p.png)")
    assert body == '<p>!<a href="https://example.org/p.png">pixel</a></p>\n'


def test_tables_are_rendered_and_plain_text_is_left_as_written() -> None:
    body, _ = render_markdown("| a | b |\n|:--|--:|\n| 1 | <i> |\n")
    assert body == (
        "<table>\n<thead>\n<tr>\n"
        '<th style="text-align:left">a</th>\n<th style="text-align:right">b</th>\n'
        "</tr>\n</thead>\n<tbody>\n<tr>\n"
        '<td style="text-align:left">1</td>\n<td style="text-align:right">&lt;i&gt;</td>\n'
        "</tr>\n</tbody>\n</table>\n"
    )
    # no links made from bare addresses, no typographic replacements
    body, _ = render_markdown('see https://example.org "quoted" -- (c)...')
    assert body == "<p>see https://example.org &quot;quoted&quot; -- (c)...</p>\n"


def test_the_frontmatter_is_split_off_only_at_the_start() -> None:
    assert render_markdown("---\ntype: note\ntitle: x\n---\n# Body\n") == (
        "<h1>Body</h1>\n",
        "type: note\ntitle: x",
    )
    assert render_markdown("---\na: 1\n---") == ("", "a: 1")
    assert render_markdown("text\n---\na: 1\n---\n") == ("<h2>text</h2>\n<h2>a: 1</h2>\n", None)
    assert render_markdown("") == ("", None)


def test_the_chart_is_exact() -> None:
    svg = bar_chart("cost <$>", [Bar("2026-11-29", 2.5), Bar("a&b", 10), Bar("x", 0)], digits=2)
    assert svg == (
        '<svg class="chart" viewBox="0 0 640 220" role="img" aria-label="cost &lt;$&gt;" '
        'xmlns="http://www.w3.org/2000/svg"><title>cost &lt;$&gt;</title>'
        '<rect x="32" y="135" width="149" height="45"><title>2026-11-29: 2.50</title></rect>'
        '<text x="106" y="194" text-anchor="middle">11-29</text>'
        '<text x="106" y="131" text-anchor="middle">2.50</text>'
        '<rect x="245" y="0" width="149" height="180"><title>a&amp;b: 10.00</title></rect>'
        '<text x="319" y="194" text-anchor="middle">a&amp;b</text>'
        '<text x="319" y="12" text-anchor="middle">10.00</text>'
        '<rect x="459" y="180" width="149" height="0"><title>x: 0.00</title></rect>'
        '<text x="533" y="194" text-anchor="middle">x</text>'
        '<text x="533" y="176" text-anchor="middle">0.00</text></svg>'
    )


def test_a_chart_of_one_bar_of_its_own_size_and_one_of_nothing() -> None:
    assert bar_chart("t", [Bar("day", 1234.5)], width=100, height=50) == (
        '<svg class="chart" viewBox="0 0 100 90" role="img" aria-label="t" '
        'xmlns="http://www.w3.org/2000/svg"><title>t</title>'
        '<rect x="15" y="0" width="70" height="50"><title>day: 1,234</title></rect>'
        '<text x="50" y="64" text-anchor="middle">day</text>'
        '<text x="50" y="12" text-anchor="middle">1,234</text></svg>'
    )
    # all zero: no bar is drawn higher than nothing
    assert bar_chart("t", [Bar("z", 0)]) == (
        '<svg class="chart" viewBox="0 0 640 220" role="img" aria-label="t" '
        'xmlns="http://www.w3.org/2000/svg"><title>t</title>'
        '<rect x="96" y="180" width="448" height="0"><title>z: 0</title></rect>'
        '<text x="320" y="194" text-anchor="middle">z</text>'
        '<text x="320" y="176" text-anchor="middle">0</text></svg>'
    )
    assert bar_chart("t", []) == (
        '<svg class="chart" viewBox="0 0 640 220" role="img" aria-label="t" '
        'xmlns="http://www.w3.org/2000/svg"><title>t</title></svg>'
    )


def test_bars_narrower_than_a_unit_are_one_wide() -> None:
    svg = bar_chart("t", [Bar(str(n), n) for n in range(1, 11)], width=5, height=10)
    assert svg.count('width="1"') == 10
    assert '<rect x="0" y="9" width="1" height="1">' in svg
    assert '<rect x="5" y="0" width="1" height="10">' in svg
