"""Search terms in every language and the embedders, exactly: the text the index holds,
the terms a query becomes, compound words found through the vocabulary, FTS5
expressions, and how an embedder is loaded and what its vectors are."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.memory import terms
from orchestrator.memory.terms import (
    SEPARATOR,
    compound_candidates,
    contains_at_boundary,
    expression,
    fold,
    indexed,
    parts,
    query_terms,
    related,
    shown,
    substrings,
    vocabulary,
)

S = SEPARATOR


def test_the_limits() -> None:
    assert SEPARATOR == "\u200b"
    assert (terms.MAX_QUERY_TERMS, terms.COMPOUND_MIN_CHARS, terms.PART_MIN_CHARS) == (32, 5, 4)
    assert (terms.RELATED_PER_WORD, terms.MAX_PARTS, terms.MAX_COMPOUND_CHARS) == (8, 4, 40)


@pytest.mark.parametrize(
    ("text", "held"),
    [
        ("plain ascii", "plain ascii"),
        ("café", "café"),
        ("cafe\u0301", "café"),  # NFC
        ("下午4點小提琴課 ok", f"{S}下{S}午{S}4{S}點{S}小{S}提{S}琴{S}課{S} ok"),
        ("a日b", f"a{S}日{S}b"),
        ("ภาษา", f"{S}ภ{S}า{S}ษ{S}า{S}"),
        ("한국어", f"{S}한{S}국{S}어{S}"),
        ("カタカナ・テスト", f"{S}カ{S}タ{S}カ{S}ナ{S}・{S}テ{S}ス{S}ト{S}"),
    ],
)
def test_indexed_sets_apart_each_letter_of_spaceless_scripts(text: str, held: str) -> None:
    assert indexed(text) == held
    assert shown(indexed(text)) == (text if text != "cafe\u0301" else "café")


def test_indexed_normalizes_spaceless_text_too() -> None:
    # a decomposed Hangul syllable (jamo) composes to one letter before it is set apart
    assert indexed("\u1112\u1161\u11ab") == f"{S}한{S}"


@pytest.mark.parametrize(
    ("letter", "inside"),
    [
        ("\u0e01", True),
        ("\u0e00", False),
        ("\u0e4e", True),
        ("\u0e4f", False),
        ("\u0e81", True),
        ("\u0edf", True),
        ("\u0ee0", False),
        ("\u1000", True),
        ("\u109f", True),
        ("\u10a0", False),
        ("\u1100", True),
        ("\u11ff", True),
        ("\u1780", True),
        ("\u17dd", True),
        ("\u17de", False),
        ("\u3005", True),
        ("\u3007", True),
        ("\u3008", False),
        ("\u3021", True),
        ("\u3029", True),
        ("\u3031", True),
        ("\u3035", True),
        ("\u303b", True),
        ("\u303c", True),
        ("\u3041", True),
        ("\u30fa", True),
        ("\u30fb", False),
        ("\u30fc", True),
        ("\u30ff", True),
        ("\u3105", True),
        ("\u312f", True),
        ("\u3131", True),
        ("\u318e", True),
        ("\u31a0", True),
        ("\u31bf", True),
        ("\u31f0", True),
        ("\u31ff", True),
        ("\u3400", True),
        ("\u4dbf", True),
        ("\u4e00", True),
        ("\u9fff", True),
        ("\ua000", True),
        ("\ua48c", True),
        ("\ua48d", False),
        ("\ua960", True),
        ("\ua97f", True),
        ("\uac00", True),
        ("\ud7ff", True),
        ("\ufa0e", True),  # in the block, and NFC keeps it
        ("\ufaff", True),
        ("\uff66", True),
        ("\uffdc", True),
        ("\uffdd", False),
        ("\U0001b000", True),
        ("\U0001b16f", True),
        ("\U00020000", True),
        ("\U0003134f", True),
        ("\U00031350", False),
    ],
)
def test_the_edges_of_the_spaceless_blocks(letter: str, inside: bool) -> None:
    assert indexed(f"é{letter}") == (f"é{S}{letter}{S}" if inside else f"é{letter}")


def test_shown_drops_only_the_separator() -> None:
    assert shown(f"{S}小{S}提{S} a b") == "小提 a b"


@pytest.mark.parametrize(
    ("word", "folded"),
    [
        ("HeLLo", "hello"),
        ("Éclair", "eclair"),
        ("ÅNGSTRÖM", "angstrom"),
        ("Straße", "straße"),
        ("x\u0301\u1ab0\u1dc0\u20d0\ufe20y", "xy"),
        ("x\u036f\u1aff\u1dff\u20ff\ufe2fy", "xy"),
        ("x\u0300y", "xy"),
        ("x\u0370y", "x\u0371y"),  # not a combining mark: kept (lowered)
    ],
)
def test_fold(word: str, folded: str) -> None:
    assert fold(word) == folded


def test_vocabulary_keeps_words_of_four_letters_or_more() -> None:
    assert vocabulary("HELLO worlds abc a1234 ab_cdef word") == {"hello", "worlds", "cdef", "word"}
    assert vocabulary("Steuererklärung abc Zahnarzt-Termin 1234 ab_cdef äbc") == {
        "steuererklarung",
        "zahnarzt",
        "termin",
        "cdef",
    }
    assert vocabulary(indexed("小提琴課 Größe")) == {"große"}
    assert vocabulary("") == set()


@pytest.mark.parametrize(
    ("query", "found"),
    [
        ("Hello hello HELLO", ["hello"]),
        ("下午4點 Hello 小", ["4", "hello", "下 午", "點", "小"]),
        ("小提琴", ["小 提", "提 琴"]),
        ("ก", ["ก"]),
        ("ภาษา", ["ภ า", "า ษ", "ษ า"]),
        ("cafe\u0301", ["café"]),
        ("a-b c_d", ["a", "b", "c_d"]),
        ("", []),
        ("\u0e31", []),  # a mark alone: no letter
        ("\u0e01\u0e31\u0e02", ["ก ข"]),  # a mark between letters splits nothing
    ],
)
def test_query_terms(query: str, found: list[str]) -> None:
    assert query_terms(query) == found


def test_query_terms_are_at_most_32() -> None:
    words = [f"w{i}" for i in range(40)]
    assert query_terms(" ".join(words)) == words[:32]


@pytest.mark.parametrize(
    ("given", "found"),
    [
        (
            ["hello", "hell", "Ärzte", "a1234", "x" * 40, "x" * 41, "hello"],
            ["hello", "arzte", "x" * 40],
        ),
        (["abcd", "abcde"], ["abcde"]),
        (["小 提", "steuer"], ["steuer"]),
        ([], []),
    ],
)
def test_compound_candidates(given: list[str], found: list[str]) -> None:
    assert compound_candidates(given) == found


@pytest.mark.parametrize(
    ("longer", "word", "holds"),
    [
        ("versicherung", "versicherung", True),
        ("krankenversicherung", "versicherung", True),
        ("versicherungen", "versicherung", True),
        ("versicherungs", "versicherung", True),
        ("versicherungern", "versicherung", True),
        ("versicherungnen", "versicherung", True),
        ("versicherungx", "versicherung", False),
        ("versicherungxy", "versicherung", False),
        ("versicherungxyz", "versicherung", True),
        ("deversicherung", "versicherung", False),
        ("abcversicherung", "versicherung", True),
        ("zversicherungen", "versicherung", False),
        ("steuererklärungsvorbereitung", "vorbereitung", True),
        ("determine", "term", False),
        ("termtermine", "termine", True),  # the second place where it occurs
        ("abcdef", "xyz", False),
        ("wortabcwortx", "wort", True),  # the first place holds it, the last does not
        ("xwortabcwortabcwortq", "wort", True),  # only the middle one holds it
        ("abcaaaaa", "aaaa", True),  # the next place is one letter on
    ],
)
def test_contains_at_boundary(longer: str, word: str, holds: bool) -> None:
    assert contains_at_boundary(longer, word) is holds


@pytest.mark.parametrize(
    "ending", ["e", "n", "s", "en", "er", "es", "em", "in", "ern", "ens", "nen"]
)
def test_each_ending_leaves_the_word_itself(ending: str) -> None:
    assert contains_at_boundary(f"wort{ending}", "wort") is True
    assert parts(f"haus{ending}boot", {"haus", "boot"}) == ["haus", "boot"]


@pytest.mark.parametrize("after", ["a", "x", "t", "ab", "ne", "ns", "nn"])
def test_other_short_tails_are_not_endings(after: str) -> None:
    assert contains_at_boundary(f"wort{after}", "wort") is False


def test_related_words_the_shortest_first_at_most_eight() -> None:
    vocabulary_words = [
        "versicherung",
        "krankenversicherung",
        "versicherungen",
        "deversicherung",
        "abcversicherung",
        "abdversicherung",
    ]
    assert related("versicherung", vocabulary_words) == [
        "versicherungen",
        "abcversicherung",
        "abdversicherung",
        "krankenversicherung",
    ]
    many = [f"{c}{c}{c}word" for c in "abcdefghij"]
    assert related("word", many) == many[:8]


def test_substrings() -> None:
    assert substrings("abcdef") == ["abcd", "bcde", "cdef", "abcde", "bcdef"]
    assert substrings("abcd") == []
    assert substrings("abc") == []


@pytest.mark.parametrize(
    ("word", "known", "cut"),
    [
        ("zahnarzttermin", {"zahnarzt", "termin"}, ["zahnarzt", "termin"]),
        (
            "steuererklärungsunterlagen",
            {"steuererklärung", "unterlagen"},
            ["steuererklärung", "unterlagen"],
        ),
        ("xylophone", {"phone"}, []),
        ("termin", {"termin"}, []),  # the whole word is no cut
        ("abcdabcd", {"abcd", "abcdabcd"}, ["abcd", "abcd"]),
        ("hausbootes", {"haus", "boot"}, ["haus", "boot"]),  # an ending after the last
        ("hausnenboot", {"haus", "boot"}, ["haus", "boot"]),
        ("hausxboot", {"haus", "boot"}, []),
        ("aaaabbbbccccdddd", {"aaaa", "bbbb", "cccc", "dddd"}, ["aaaa", "bbbb", "cccc", "dddd"]),
        ("aaaabbbbccccddddeeee", {"aaaa", "bbbb", "cccc", "dddd", "eeee"}, []),  # five parts
        (
            "aaaabbbbccccdddd",
            {"aaaa", "bbbb", "cccc", "dddd", "aaaabbbb"},
            ["aaaabbbb", "cccc", "dddd"],
        ),  # the fewest parts
        (
            "aaaabbbbccccdddd",
            {"aaaa", "bbbb", "cccc", "dddd", "bbbbccccdddd"},
            ["aaaa", "bbbbccccdddd"],
        ),
        ("abc", {"abc"}, []),
        ("abcdef", {"ab", "cdef"}, []),  # a part has four letters or more
        ("abcdefgh", {"abcd", "efg", "h"}, []),
        ("termine", {"termin"}, []),  # one part and an ending is the word, not a cut
    ],
)
def test_parts(word: str, known: set[str], cut: list[str]) -> None:
    assert parts(word, known) == cut


def test_parts_keep_the_first_cut_of_the_fewest() -> None:
    # "aaaab" + "bbbcccc" and "aaaa" + "bbbbcccc" are both two parts: the first found stays
    assert parts("aaaabbbbcccc", {"aaaa", "bbbbcccc", "aaaab", "bbbcccc"}) == ["aaaa", "bbbbcccc"]


@pytest.mark.parametrize(
    ("given", "query"),
    [
        (["a", "b"], '"a" OR "b"'),
        (['say "hi"', "x", "x"], '"say ""hi""" OR "x"'),
        (["小 提"], '"小 提"'),
        (["NOT", "a*"], '"NOT" OR "a*"'),
        ([], None),
    ],
)
def test_expression(given: list[str], query: str | None) -> None:
    assert expression(given) == query


# memory/embeddings.py


def test_an_unknown_embedder_is_refused(tmp_path: Path) -> None:
    from orchestrator.memory.embeddings import EmbedderUnavailable, load_embedder

    with pytest.raises(EmbedderUnavailable) as info:
        load_embedder("openai", tmp_path)
    assert str(info.value) == "unknown embedder 'openai'; known: wordllama"


def test_without_the_extra_the_error_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from orchestrator.memory.embeddings import EmbedderUnavailable, WordLlamaEmbedder

    monkeypatch.setitem(sys.modules, "wordllama", None)
    with pytest.raises(EmbedderUnavailable) as info:
        WordLlamaEmbedder(tmp_path)
    assert str(info.value) == (
        "memory_search.embedder is wordllama, but it is not installed (import of wordllama "
        "halted; None in sys.modules); install the extra: pip install 'orchestrator[embeddings]'"
    )


def test_the_tokenizer_is_copied_once_and_a_changed_copy_is_replaced(tmp_path: Path) -> None:
    pytest.importorskip("wordllama")
    import wordllama

    from orchestrator.memory.embeddings import WordLlamaEmbedder

    shipped = Path(wordllama.__file__).parent / "tokenizers/l2_supercat_tokenizer_config.json"
    cache = tmp_path / "a/b"
    embedder = WordLlamaEmbedder(cache)
    copy = cache / "tokenizers" / shipped.name
    assert copy.read_bytes() == shipped.read_bytes()
    assert embedder.name == "wordllama-l2_supercat-256"
    copy.write_bytes(b"{}")
    WordLlamaEmbedder(cache)
    assert copy.read_bytes() == shipped.read_bytes()
    same_size = b" " * shipped.stat().st_size
    copy.write_bytes(same_size)
    with pytest.raises(Exception):  # noqa: B017 - the size matches: the copy is kept
        WordLlamaEmbedder(cache)
    assert copy.read_bytes() == same_size


def test_vectors_are_unit_rows_of_256(tmp_path: Path) -> None:
    pytest.importorskip("wordllama")
    import numpy

    from orchestrator.memory.embeddings import load_embedder

    embedder = load_embedder("wordllama", tmp_path)
    assert load_embedder("wordllama", tmp_path) is embedder
    assert (tmp_path / "embedders/wordllama/tokenizers").is_dir()
    vectors = embedder.embed(["the violin lesson", "a cat"])
    assert vectors.shape == (2, 256) and vectors.dtype == numpy.float32
    assert numpy.allclose(numpy.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    empty = embedder.embed([])
    assert empty.shape == (0, 256) and empty.dtype == numpy.float32
    other = load_embedder("wordllama", tmp_path / "other")
    assert other is not embedder


def test_a_text_of_no_words_is_a_zero_row(tmp_path: Path) -> None:
    pytest.importorskip("wordllama")
    import numpy

    from orchestrator.memory.embeddings import WordLlamaEmbedder

    embedder = WordLlamaEmbedder(tmp_path)
    embedder._model = type("Zero", (), {"embed": lambda self, t: [[0.0, 0.0], [3.0, 4.0]]})()
    rows = embedder.embed(["", "x"])
    assert rows.tolist() == [[0.0, 0.0], [0.6000000238418579, 0.800000011920929]]
    assert rows.dtype == numpy.float32


class _FakeWordLlama:
    loads: list[dict[str, object]] = []

    @classmethod
    def load(cls, **kwargs: object) -> str:
        cls.loads.append(kwargs)
        return "model"


def _fake_wordllama(monkeypatch: pytest.MonkeyPatch, package: Path) -> None:
    import sys
    import types

    module = types.ModuleType("wordllama")
    module.__file__ = str(package / "__init__.py")
    module.WordLlama = _FakeWordLlama  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "wordllama", module)
    _FakeWordLlama.loads = []


def test_the_model_is_loaded_from_the_cache_with_downloads_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.memory.embeddings import WordLlamaEmbedder

    package = tmp_path / "site/wordllama"
    (package / "tokenizers").mkdir(parents=True)
    shipped = package / "tokenizers/l2_supercat_tokenizer_config.json"
    shipped.write_text('{"a": 1}')
    _fake_wordllama(monkeypatch, package)
    cache = tmp_path / "state/embedders/wordllama"
    embedder = WordLlamaEmbedder(cache)
    assert embedder._model == "model"
    assert _FakeWordLlama.loads == [{"cache_dir": cache, "disable_download": True}]
    assert (cache / "tokenizers/l2_supercat_tokenizer_config.json").read_text() == '{"a": 1}'


def test_a_wordllama_without_its_tokenizer_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.memory.embeddings import EmbedderUnavailable, WordLlamaEmbedder

    package = tmp_path / "site/wordllama"
    (package / "tokenizers/l2_supercat_tokenizer_config.json").mkdir(parents=True)  # no file
    _fake_wordllama(monkeypatch, package)
    with pytest.raises(EmbedderUnavailable) as info:
        WordLlamaEmbedder(tmp_path / "cache")
    shipped = package / "tokenizers/l2_supercat_tokenizer_config.json"
    assert str(info.value) == f"wordllama has no tokenizer at {shipped}"
    assert not (tmp_path / "cache").exists() and _FakeWordLlama.loads == []
