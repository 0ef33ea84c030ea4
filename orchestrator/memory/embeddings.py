"""Embedders for hybrid memory search: a small interface, and one offline embedder.

An embedder turns texts into unit vectors. Memory search blends cosine similarity with
BM25 when orchestrator.yaml names one (``memory_search.embedder``); without one, search
is BM25 alone and nothing here is imported.

``wordllama`` is the offline option (the ``embeddings`` extra): a static word-embedding
model whose weights and tokenizer ship inside its wheel, so nothing is downloaded at run
time. Its loader looks for the tokenizer in a folder the wheel does not have, so the
tokenizer the wheel carries is copied once into ``state/embedders/wordllama/`` and the
model is loaded from there with downloads disabled.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

EMBEDDERS = ("wordllama",)


class EmbedderUnavailable(Exception):
    """The configured embedder cannot be loaded (its extra is not installed, say)."""


class Embedder(Protocol):
    name: str  # stored with the vectors: vectors of another embedder are made again

    def embed(self, texts: list[str]) -> np.ndarray:
        """One float32 row per text, each of length 1 (or 0 for a text of no words)."""


class WordLlamaEmbedder:
    name = "wordllama-l2_supercat-256"

    def __init__(self, cache_dir: Path) -> None:
        try:
            import numpy  # noqa: F401
            import wordllama
            from wordllama import WordLlama
        except ImportError as exc:
            raise EmbedderUnavailable(
                f"memory_search.embedder is wordllama, but it is not installed ({exc}); "
                "install the extra: pip install 'orchestrator[embeddings]'"
            ) from None
        package = Path(wordllama.__file__).parent
        shipped = package / "tokenizers" / "l2_supercat_tokenizer_config.json"
        if not shipped.is_file():
            raise EmbedderUnavailable(f"wordllama has no tokenizer at {shipped}")
        tokenizers = cache_dir / "tokenizers"
        tokenizers.mkdir(parents=True, exist_ok=True)
        target = tokenizers / shipped.name
        if not target.exists() or target.stat().st_size != shipped.stat().st_size:
            shutil.copyfile(shipped, target)
        self._model = WordLlama.load(cache_dir=cache_dir, disable_download=True)

    def embed(self, texts: list[str]) -> np.ndarray:
        import numpy

        if not texts:
            return numpy.zeros((0, 256), dtype=numpy.float32)
        vectors = numpy.asarray(self._model.embed(texts), dtype=numpy.float32)
        norms = numpy.linalg.norm(vectors, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        unit: np.ndarray = vectors / norms
        return unit


_loaded: dict[tuple[str, str], Embedder] = {}
_guard = threading.Lock()


def load_embedder(name: str, state_dir: Path) -> Embedder:
    """The embedder called ``name`` (loaded once per process)."""
    if name not in EMBEDDERS:
        raise EmbedderUnavailable(f"unknown embedder {name!r}; known: {', '.join(EMBEDDERS)}")
    key = (name, str(state_dir))
    with _guard:
        if key not in _loaded:
            _loaded[key] = WordLlamaEmbedder(Path(state_dir) / "embedders" / name)
        return _loaded[key]
