"""Fuzzing the renderers of text a model or a chat user wrote: the chat apps' Markdown
(orchestrator/channels/textfmt.py: Telegram's, Matrix's and email's HTML;
orchestrator/channels/slack/mrkdwn.py: Slack's mrkdwn, and Slack's text read back), and
the dashboard's memory pages (orchestrator/dashboard/render.py).

Safety: the output holds no tag, attribute or link the renderer did not make from the
Markdown constructs it documents ("any other character is escaped, so nothing the model
writes can open a tag"; Slack: "nothing the model writes becomes a link, a user mention
or an @channel"; dashboard: "raw HTML escaped and only safe link schemes kept"). Tags
are balanced (Telegram refuses a message whose HTML is not), and split pieces keep
their limits.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from hypothesis import example, given
from hypothesis import strategies as st

from orchestrator.channels.slack.mrkdwn import markdown_to_mrkdwn, mrkdwn_pieces, slack_to_text
from orchestrator.channels.textfmt import markdown_to_html, split_message, utf16_len
from orchestrator.dashboard.render import render_markdown
from tests.fuzzing import fuzz, mutated_text

SEEDS = [
    "# Plan\n\n**Bold** and *italic* and _under_ and ~~gone~~ and `code <b>`.\n",
    'See [the docs](https://example.org/a?b=1&c=2) and [x](http://x.org/"onload=alert(1)).',
    "```python\nprint('<script>alert(1)</script>')\n```\nafter",
    "```\nunclosed fence <i>\n",
    "- one\n* two\n+ three\n\n1. first\n\n> quoted <img src=x onerror=alert(1)>\n",
    "<script>alert(1)</script><a href=javascript:alert(1)>x</a><!-- c --> &amp; &lt;",
    "[a](javascript:alert(1)) [b](//evil.org) [c](/\\evil.org) [d](https:evil.org) "
    "[e](mailto:a@b.org) [f](<java\tscript:x>) [g](data:text/html,x) ![i](http://x/i.png)",
    "| a | b |\n|:--|--:|\n| <b> | `x` |\n",
    "@channel <!here> <@U123> <#C1|general> <https://x.org|label> &lt; &gt; &amp;",
    "**nested _italic `code` and [link](https://a.org)_ bold** ~~*x*~~",
    "text with emoji 👋🏽 and CJK 漢字 and RTL \u202e and NUL \x00 and \r\n",
]
texts = st.one_of(
    mutated_text(SEEDS, max_edits=10),
    st.text(alphabet="*_~`[]()<>!&#|-\n :/\\\"'=xyhtps.@", max_size=80),
    st.text(max_size=40),
)


class Tags(HTMLParser):
    """The tags and attributes of an HTML fragment, and whether they nest properly."""

    VOID = frozenset({"br", "hr", "img", "input"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.seen: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.open: list[str] = []
        self.balanced = True
        self.other: list[str] = []  # comments, declarations, processing instructions

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.seen.append((tag, attrs))
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open.pop() != tag:
            self.balanced = False

    def handle_comment(self, data: str) -> None:
        self.other.append("comment")

    def handle_decl(self, decl: str) -> None:
        self.other.append("declaration")

    def handle_pi(self, data: str) -> None:
        self.other.append("processing instruction")

    def unknown_decl(self, data: str) -> None:
        self.other.append("declaration")


def parsed(fragment: str) -> Tags:
    tags = Tags()
    tags.feed(fragment)
    tags.close()
    return tags


def safe_href(url: str | None, schemes: tuple[str, ...]) -> bool:
    """A link a browser would follow only to where the renderer means: one of
    ``schemes``, or within the site (no scheme, not //host or /\\host)."""
    if url is None:
        return False
    clean = re.sub(r"[\t\n\r]", "", url).lstrip(" \x00-\x1f")
    found = re.match(r"([a-zA-Z][a-zA-Z0-9+.-]*):", clean)
    if found:
        scheme = found[1].lower()
        if scheme == "mailto":
            return scheme in schemes
        return scheme in schemes and bool(re.match(r"[a-z]+://[^/\\]", clean, re.I))
    return not re.match(r"[/\\]{2}", clean)


TELEGRAM_TAGS = {"b", "i", "s", "code", "pre", "a"}


@fuzz(400)
@given(text=texts)
@example(text=SEEDS[1])
@example(text='[x](https://a.org/"><script>)')
@example(text='```js" onclick="x\n1\n```')
@example(text="**a *b** c*")
@example(text="*a **b* c**")
@example(text="[**a](https://x.org)**")
def test_chat_html_holds_only_the_tags_it_makes(text: str) -> None:
    rendered = markdown_to_html(text)
    tags = parsed(rendered)
    assert tags.balanced and not tags.open and not tags.other, rendered
    for tag, attrs in tags.seen:
        assert tag in TELEGRAM_TAGS, rendered
        if tag == "a":
            assert [name for name, _ in attrs] == ["href"], rendered
            # a link the model wrote, to any http(s) address (its documented links)
            assert re.match(r"https?://", attrs[0][1] or ""), rendered
        elif tag == "code":
            assert all(
                n == "class" and re.fullmatch(r"language-[\w+-]+", v or "") for n, v in attrs
            )
        else:
            assert not attrs, rendered


@fuzz(200)
@given(text=texts, limit=st.integers(min_value=16, max_value=120))
@example(text="```\n" + "x" * 200 + "\n```", limit=16)
@example(text="👋" * 40, limit=17)
def test_split_pieces_keep_the_limit_and_render_alone(text: str, limit: int) -> None:
    for piece in split_message(text, limit):
        assert utf16_len(piece) <= limit
        tags = parsed(markdown_to_html(piece))
        assert tags.balanced and not tags.open


@fuzz(400)
@given(text=texts)
@example(text=SEEDS[8])
@example(text="[<!channel>](https://x.org) [a|b](https://x.org/|<@U1>)")
@example(text="[x](https://a.org/>|<!here)")
def test_slack_mrkdwn_holds_only_the_links_it_makes(text: str) -> None:
    for rendered in [markdown_to_mrkdwn(text), *mrkdwn_pieces(text, 200)]:
        # every control sequence <...> is a link the renderer made, to http(s)
        for inner in re.findall(r"<([^>]*)>?", rendered):
            assert re.match(r"https?://", inner), rendered
        assert not re.search(r"<[!@#]", rendered), rendered


@fuzz(200)
@given(text=texts)
@example(text="<@U1|al> <#C1|general> <!subteam^S1|@team> <https://x|y> <mailto:a@b|a>")
def test_slack_text_reads_without_raising(text: str) -> None:
    assert isinstance(slack_to_text(text), str)


DASHBOARD_TAGS = {
    "p", "h1", "h2", "h3", "h4", "h5", "h6", "em", "strong", "code", "pre", "a", "ul", "ol",
    "li", "blockquote", "hr", "br", "table", "thead", "tbody", "tr", "th", "td",
}  # fmt: skip
DASHBOARD_ATTRS = {("a", "href"), ("a", "title"), ("ol", "start"), ("code", "class")}


@fuzz(400)
@given(text=texts)
@example(text=SEEDS[6])
@example(text="[a](java&#x09;script:alert(1)) [b](&#106;avascript:x) [c](\\\\evil.org)")
@example(text="---\ntype: note\n---\n<script>x</script>")
@example(text='[a](https://x.org "t\\" onmouseover=\\"x")')
def test_the_dashboard_shows_memory_without_markup_of_its_own(text: str) -> None:
    rendered, _ = render_markdown(text)
    tags = parsed(rendered)
    assert not tags.other, rendered
    for tag, attrs in tags.seen:
        assert tag in DASHBOARD_TAGS, rendered
        for name, value in attrs:
            if (tag, name) == ("th", "style") or (tag, name) == ("td", "style"):
                assert re.fullmatch(r"text-align:(left|right|center)", value or ""), rendered
                continue
            assert (tag, name) in DASHBOARD_ATTRS, rendered
            if name == "href":
                assert safe_href(value, ("http", "https", "mailto")), rendered
            if name == "class":
                assert (value or "").startswith("language-"), rendered  # the info string
