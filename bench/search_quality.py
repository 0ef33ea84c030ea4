"""python -m bench.search_quality: how well does memory search rank, in which language?

Two fixture corpora. The English one (tests/searchcorpus.py): its keyword queries and
the same files asked in other words, with BM25 alone and blended with the wordllama
embedder at several weights: top-1 accuracy and mean reciprocal rank (MRR, over the
first 5 results). The multilingual one (tests/searchcorpus_multilingual.py): questions
in Cantonese, German and English, each with the file that answers it, ranked by the
previous release's index (bench/search_before.py), by this one, and by this one with the
embedder: per language, the questions answered in the top 3, those with no result at
all, the top-3 places taken by maps (index.md files that link, system/definition.md),
the questions whose answer a map outranks, and MRR. Last, what compound matching costs:
the files it brings into a top 3 that are not the answer. The embedder rows need the
`embeddings` extra; without it they are left out, and the output says so."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from orchestrator.memory.search import MemoryIndex, fts_query

HYBRID_WEIGHTS = (0.3, 0.5, 0.7)


class WithoutCompounds(MemoryIndex):
    """This release's index, searched by the query's own terms alone."""

    def _match(self, query: str) -> str | None:
        return fts_query(query)


def _paths(index, query: str, count: int) -> list[str]:  # type: ignore[no-untyped-def]
    return [h.path for h in index.search(query, count)]


def _rank(index, query: str, want: str) -> int | None:  # type: ignore[no-untyped-def]
    paths = _paths(index, query, 5)
    return paths.index(want) + 1 if want in paths else None


def _embedder(state: Path):  # type: ignore[no-untyped-def]
    """The wordllama embedder, or None (and why) without the `embeddings` extra."""
    from orchestrator.memory.embeddings import EmbedderUnavailable, load_embedder

    try:
        return load_embedder("wordllama", state), ""
    except EmbedderUnavailable as exc:
        return None, str(exc)


def english(root: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    from tests.searchcorpus import PARAPHRASES, QUERIES, write_corpus

    write_corpus(root / "groups/en/memory")
    sets = {"keyword queries": QUERIES, "paraphrases": PARAPHRASES}
    configs = [("BM25 alone", None, 0.0)]
    if embedder is not None:
        configs += [(f"hybrid, vector weight {w}", embedder, w) for w in HYBRID_WEIGHTS]
    print("## English corpus\n\n| ranking | set | top-1 | MRR@5 |\n|---|---|---|---|")
    for label, emb, weight in configs:
        index = MemoryIndex(
            root / "state", root / "groups", "en", embedder=emb, vector_weight=weight
        )
        index.update(force=True)
        for name, queries in sets.items():
            ranks = [_rank(index, q, want) for q, want in queries]
            top1 = sum(1 for r in ranks if r == 1) / len(ranks)
            mrr = sum(1 / r for r in ranks if r) / len(ranks)
            print(f"| {label} | {name} ({len(ranks)}) | {top1:.0%} | {mrr:.2f} |")
        index.close()


def multilingual(root: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    from bench.search_before import BeforeIndex
    from tests.searchcorpus_multilingual import LANGUAGES, MAPS, QUESTIONS, write_corpus

    write_corpus(root / "groups/ml/memory")
    state, groups = root / "state", root / "groups"
    configs = [
        ("BM25, the previous release", BeforeIndex(root / "state-before", groups, "ml")),
        ("BM25", MemoryIndex(state, groups, "ml")),
    ]
    if embedder is not None:
        hybrid = MemoryIndex(root / "state-hybrid", groups, "ml", embedder=embedder)
        configs.append(("hybrid, vector weight 0.5", hybrid))
    print(
        "\n## Multilingual corpus\n\n"
        "| ranking | language | answered in the top 3 | no result | top-3 places of maps "
        "| a map above the answer | MRR@5 |\n|---|---|---|---|---|---|---|"
    )
    for label, index in configs:
        index.update(force=True)
        totals = [0, 0, 0, 0, 0]
        for language, questions in QUESTIONS.items():
            found = empty = maps = outranked = 0
            reciprocal = 0.0
            for query, want, _ in questions:
                paths = _paths(index, query, 5)
                found += want in paths[:3]
                empty += not paths
                maps += sum(1 for p in paths[:3] if p in MAPS)
                above = paths[: paths.index(want)] if want in paths else paths
                outranked += any(p in MAPS for p in above)
                reciprocal += 1 / (paths.index(want) + 1) if want in paths else 0.0
            for n, value in enumerate((found, empty, maps, outranked, len(questions))):
                totals[n] += value
            print(
                f"| {label} | {LANGUAGES[language]} | {found}/{len(questions)} | {empty} "
                f"| {maps} | {outranked} | {reciprocal / len(questions):.2f} |"
            )
        found, empty, maps, outranked, asked = totals
        print(f"| {label} | all | {found}/{asked} | {empty} | {maps} | {outranked} | |")
        index.close()


def compound_cost(root: Path) -> None:
    """The files compound matching brings into a top 3 that are not the answer."""
    import tests.searchcorpus as english_corpus
    import tests.searchcorpus_multilingual as corpus

    print(
        "\n## Compound matching\n\n| corpus | queries it changes | answers it brings into "
        "the top 3 | other files it brings into the top 3 |\n|---|---|---|---|"
    )
    sets = [
        (
            "multilingual",
            corpus.write_corpus,
            [(q, want) for questions in corpus.QUESTIONS.values() for q, want, _ in questions],
        ),
        (
            "English",
            english_corpus.write_corpus,
            english_corpus.QUERIES + english_corpus.PARAPHRASES,
        ),
    ]
    rows: list[str] = []
    listed: list[str] = []
    for name, writer, queries in sets:
        folder = f"compounds-{name.lower()}"
        writer(root / "groups" / folder / "memory")
        full = MemoryIndex(root / "state-c", root / "groups", folder)
        full.update(force=True)
        bare = WithoutCompounds(root / "state-c", root / "groups", folder)
        changed, gained, others = 0, 0, []
        for query, want in queries:
            if full._match(query) == fts_query(query):
                continue
            changed += 1
            before, after = _paths(bare, query, 3), _paths(full, query, 3)
            gained += want in after and want not in before
            others += [f"{query!r}: {p}" for p in after if p not in before and p != want]
        rows.append(f"| {name} | {changed}/{len(queries)} | {gained} | {len(others)} |")
        listed += others
        full.close()
        bare.close()
    print("\n".join(rows))
    if listed:
        print("\nThe other files:\n\n" + "\n".join(f"- {line}" for line in listed))


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-quality-") as tmp:
        root = Path(tmp)
        embedder, why = _embedder(root / "state")
        if embedder is None:
            print(f"(hybrid rows left out: {why}; pip install 'orchestrator[embeddings]')\n")
        english(root, embedder)
        multilingual(root, embedder)
        compound_cost(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
