"""python -m bench.search_quality: does hybrid search rank better than BM25 alone?

Ranks the fixture corpus (tests/searchcorpus.py) for its keyword queries and for the
same files asked in other words, with BM25 alone and blended with the wordllama
embedder at several weights; prints top-1 accuracy and mean reciprocal rank (MRR, over
the first 5 results) for each. Needs the `embeddings` extra."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path


def _rank(index, query: str, want: str) -> int | None:  # type: ignore[no-untyped-def]
    paths = [h.path for h in index.search(query, 5)]
    return paths.index(want) + 1 if want in paths else None


def main() -> int:
    from orchestrator.memory.embeddings import load_embedder
    from orchestrator.memory.search import MemoryIndex
    from tests.searchcorpus import PARAPHRASES, QUERIES, write_corpus

    sets = {"keyword queries": QUERIES, "paraphrases": PARAPHRASES}
    with tempfile.TemporaryDirectory(prefix="bench-quality-") as tmp:
        root = Path(tmp)
        write_corpus(root / "groups/g/memory")
        embedder = load_embedder("wordllama", root / "state")
        configs = [("BM25 alone", None, 0.0)] + [
            (f"hybrid, vector weight {w}", embedder, w) for w in (0.3, 0.5, 0.7)
        ]
        print("| ranking | set | top-1 | MRR@5 |\n|---|---|---|---|")
        for label, emb, weight in configs:
            index = MemoryIndex(
                root / "state", root / "groups", "g", embedder=emb, vector_weight=weight
            )
            index.update(force=True)
            for name, queries in sets.items():
                ranks = [_rank(index, q, want) for q, want in queries]
                top1 = sum(1 for r in ranks if r == 1) / len(ranks)
                mrr = sum(1 / r for r in ranks if r) / len(ranks)
                print(f"| {label} | {name} ({len(ranks)}) | {top1:.0%} | {mrr:.2f} |")
            index.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
