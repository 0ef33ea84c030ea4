"""Search terms in every language: how memory text goes into the FTS5 index, and how a
query becomes an FTS5 expression (``orchestrator.memory.search`` uses both).

FTS5's ``unicode61`` tokenizer cuts text at spaces and punctuation, so a run of Chinese,
Japanese, Korean, Thai, Lao, Khmer or Myanmar letters is one "word": ``下午4點小提琴課``
is never found by ``小提琴課``. The index therefore holds such text with a separator
(U+200B, zero width, which unicode61 skips like a space) between every two of its
letters, making each letter a token; a query's run of them becomes its overlapping
pairs, each a two-token phrase (``"小 提" OR "提 琴" OR "琴 課"``), and a single letter is
itself. A phrase ranks by its own document frequency (FTS5's BM25 counts phrases), so
this matches and ranks like an index of character bigrams, and also finds one-letter
queries, while the stored text stays the original (snippets drop the separators) and
English words keep their stemming (FTS5's porter tokenizer).

Compound words (German ``Steuererklärungsvorbereitung``, ``Krankenversicherung``) are
found through the index's own vocabulary: a long query word also matches the indexed
words that contain it at a plausible compound boundary, and a query word that no file
holds matches the words files hold that make it up (``Zahnarzttermin``: ``zahnarzt``,
``termin``). Everything here is a pure function of text.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Iterable

SEPARATOR = "\u200b"  # zero width space: a separator to unicode61, invisible when shown
# Letters of scripts written without spaces between words, by block (each block's marks
# and digits included: unicode61 splits at marks anyway, and a digit may be its own token).
_SPACELESS_RANGES = (
    "\u0e01-\u0e4e"  # Thai
    "\u0e81-\u0edf"  # Lao
    "\u1000-\u109f"  # Myanmar
    "\u1100-\u11ff"  # Hangul Jamo
    "\u1780-\u17dd"  # Khmer
    "\u3005-\u3007\u3021-\u3029\u3031-\u3035\u303b\u303c"  # 々〆〇, Suzhou numerals, repeats
    "\u3041-\u30fa\u30fc-\u30ff"  # Hiragana, Katakana (not the middle dot)
    "\u3105-\u312f\u3131-\u318e\u31a0-\u31bf\u31f0-\u31ff"  # Bopomofo, Jamo, Katakana
    "\u3400-\u4dbf\u4e00-\u9fff"  # CJK ideographs
    "\ua000-\ua48c"  # Yi
    "\ua960-\ua97f\uac00-\ud7ff"  # Hangul
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uff66-\uffdc"  # halfwidth Katakana and Hangul
    "\U0001b000-\U0001b16f"  # Kana supplement
    "\U00020000-\U0003134f"  # CJK ideographs, extensions B to G
)
_SPACELESS = re.compile(f"[{_SPACELESS_RANGES}]")
_SPACELESS_RUN = re.compile(f"[{_SPACELESS_RANGES}]+")
_WORD = re.compile(r"\w+")
_VOCABULARY_WORD = re.compile(r"[^\W\d_]{4,}")  # letters only; CJK letters stand alone
# the same words in lowercase ASCII text, where the only letters are a to z: half the time
_ASCII_VOCABULARY_WORD = re.compile(r"[a-z]{4,}")
_DIACRITIC = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")

MAX_QUERY_TERMS = 32
# Compound matching: a query word of COMPOUND_MIN_CHARS letters or more also matches the
# indexed words that contain it (at most RELATED_PER_WORD of them, the shortest first);
# a word that matches nothing matches its parts: indexed words of PART_MIN_CHARS or more
# that make up all of it (at most MAX_PARTS). Words past MAX_COMPOUND_CHARS stay whole.
COMPOUND_MIN_CHARS = 5
PART_MIN_CHARS = 4
RELATED_PER_WORD = 8
MAX_PARTS = 4
MAX_COMPOUND_CHARS = 40
# What may follow a word inside a longer one and still leave it that word: nothing, an
# ending (German and English inflections, German's linking s), or a word of its own.
_ENDINGS = frozenset({"e", "n", "s", "en", "er", "es", "em", "in", "ern", "ens", "nen"})
_OWN_WORD_MIN = 3  # a prefix or suffix this long may be a word of its own


def indexed(text: str) -> str:
    """``text`` as the index holds it: NFC, and every letter of a script written
    without spaces set apart by SEPARATOR (text without such letters is unchanged)."""
    if text.isascii():  # NFC already, and none of those letters
        return text
    if not unicodedata.is_normalized("NFC", text):
        text = unicodedata.normalize("NFC", text)
    if not _SPACELESS.search(text):
        return text
    return _SPACELESS_RUN.sub(_set_apart, text)


def _set_apart(run: re.Match[str]) -> str:
    return SEPARATOR + SEPARATOR.join(run.group()) + SEPARATOR


def shown(text: str) -> str:
    """Indexed text (or a snippet of it) as it was written."""
    return text.replace(SEPARATOR, "")


def fold(word: str) -> str:
    """A word as the vocabulary keys it: lowercase, without diacritics (as unicode61
    with remove_diacritics folds it)."""
    if word.isascii():
        return word.lower()
    bare = _DIACRITIC.sub("", unicodedata.normalize("NFD", word))
    return unicodedata.normalize("NFC", bare).lower()


def vocabulary(text: str) -> set[str]:
    """The folded words of indexed text that compound matching may use: letters only,
    at least PART_MIN_CHARS of them (so no CJK letter, which the index holds alone)."""
    if text.isascii():  # the common case, lowered at once
        return set(_ASCII_VOCABULARY_WORD.findall(text.lower()))
    return {fold(w) for w in set(_VOCABULARY_WORD.findall(text))}


def query_terms(query: str) -> list[str]:
    """A query's terms, without repeats, at most MAX_QUERY_TERMS: its words (lowercase),
    then for each run of letters of a script written without spaces its overlapping
    pairs, each a two-token phrase ("小 提"), or the letter itself when the run is one."""
    query = unicodedata.normalize("NFC", query)
    terms: list[str] = []
    for run in _SPACELESS_RUN.findall(query):
        letters = [c for c in run if c.isalnum()]  # a mark splits nothing (see _SPACELESS)
        if len(letters) == 1:
            terms.append(letters[0])
        terms += [f"{a} {b}" for a, b in itertools.pairwise(letters)]
    words = [w.lower() for w in _WORD.findall(_SPACELESS_RUN.sub(" ", query))]
    return list(dict.fromkeys(words + terms))[:MAX_QUERY_TERMS]


def compound_candidates(terms: Iterable[str]) -> list[str]:
    """The folded query words that compound matching looks up: letters only, from
    COMPOUND_MIN_CHARS to MAX_COMPOUND_CHARS long."""
    out = []
    for term in terms:
        if term.isalpha() and COMPOUND_MIN_CHARS <= len(term) <= MAX_COMPOUND_CHARS:
            out.append(fold(term))
    return list(dict.fromkeys(out))


def contains_at_boundary(longer: str, word: str) -> bool:
    """Whether ``longer`` holds ``word`` as a compound part or an inflected form: what
    comes before it is nothing or a word of its own (at least 3 letters: "kranken" in
    "krankenversicherung", not "de" in "determine"), and what follows is nothing, an
    ending ("versicherungen") or a word of its own ("steuererklärungsvorbereitung")."""
    start = longer.find(word)
    while start != -1:
        before, after = longer[:start], longer[start + len(word) :]
        if (not before or len(before) >= _OWN_WORD_MIN) and (
            not after or after in _ENDINGS or len(after) >= _OWN_WORD_MIN
        ):
            return True
        start = longer.find(word, start + 1)
    return False


def related(word: str, containing: Iterable[str]) -> list[str]:
    """Of the vocabulary words that contain ``word``, those that hold it as a part or
    an inflected form, the shortest first, at most RELATED_PER_WORD."""
    found = {w for w in containing if w != word and contains_at_boundary(w, word)}
    return sorted(found, key=lambda w: (len(w), w))[:RELATED_PER_WORD]


def substrings(word: str) -> list[str]:
    """Every substring of ``word`` that could be one of its parts (PART_MIN_CHARS or
    more, shorter than the word)."""
    n = len(word)
    return [word[i : i + size] for size in range(PART_MIN_CHARS, n) for i in range(n - size + 1)]


def parts(word: str, known: set[str]) -> list[str]:
    """A compound the index does not hold whole, cut into ``known`` words: the fewest
    (two to MAX_PARTS) that make up all of it, with an ending or a linking s between
    them and an ending after the last ("zahnarzttermin" -> ["zahnarzt", "termin"],
    "steuererklärungsunterlagen" -> ["steuererklärung", "unterlagen"]); [] when no such
    cut exists ("xylophone" is not "phone" and something unknown)."""
    n = len(word)
    best: dict[int, list[str]] = {0: []}  # where a part may start -> the parts before
    for start in range(n):
        if start not in best or len(best[start]) == MAX_PARTS:
            continue
        for end in range(start + PART_MIN_CHARS, n + 1):
            piece = word[start:end]
            if piece == word or piece not in known:
                continue
            cut = [*best[start], piece]
            for ending in ("", *_ENDINGS):
                after = end + len(ending)
                if word.startswith(ending, end) and (
                    after not in best or len(cut) < len(best[after])
                ):
                    best[after] = cut
    found = best.get(n, [])
    return found if len(found) >= 2 else []


def expression(terms: Iterable[str]) -> str | None:
    """Terms as an FTS5 query: any of them, each quoted (no operator passes through);
    None when there is none."""
    quoted = ['"' + t.replace('"', '""') + '"' for t in dict.fromkeys(terms)]
    return " OR ".join(quoted) if quoted else None
