"""The language server's context from open documents: its open documents as the engine's
OpenFiles (umbra/engine/context.py), with when each was last used, for an editor completion,
and the workspace files on disk that the current document imports (lsp/imported_files.py:
inside the workspace only, bounded; an open document's text wins over its file on disk).

    context = OpenContext(options.context, root, canonical)   # canonical: editor language id -> name
    context.touch(uri)                          # didOpen / didChange / a completion in it
    context.forget(uri)                         # didClose
    context.reconfigure(options.context, canonical)  # workspace/didChangeConfiguration
    repo = context.select(uri, document, prefix, documents)  # a RepoContext, or None (off / nothing)

`file:` URIs become paths (the exclusion globs and the workspace's .gitignore apply to them);
other schemes (an unsaved buffer) keep their URI as the name. Only the `max_candidates` most
recently used documents are read at all, so thousands of open documents cost a sort of their
names. Lone surrogates in the snippets become U+FFFD, as in the prefix (lsp/documents.py). A
failure here is never the completion's: it logs its type and completes without context."""

from __future__ import annotations

import logging
from collections.abc import Callable
from urllib.parse import unquote, urlparse

from dataclasses import replace

from lsp.documents import Document, Documents, well_formed
from lsp.imported_files import ImportedFiles
from lsp.options import ContextOptions
from umbra.engine.context import ContextProvider, OpenFile, RepoContext
from umbra.engine.context_exclusions import ContextExclusions

log = logging.getLogger("umbra.lsp")


def uri_path(uri: str) -> str:
    """The file path of a `file:` URI; any other URI as it is."""
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else uri


class OpenContext:
    def __init__(self, options: ContextOptions, root_uri: str | None,
                 canonical: Callable[[str | None], str | None] = lambda language: language):
        self.root = uri_path(root_uri) if root_uri and root_uri.startswith("file:") else None
        self.reconfigure(options, canonical)
        self._used: dict[str, int] = {}  # uri -> tick of its last use
        self._tick = 0

    def reconfigure(self, options: ContextOptions, canonical: Callable[[str | None], str | None]) -> None:
        """New options (and language names); which documents were used when is kept."""
        self.enabled = options.enabled
        self.provider = ContextProvider(options.engine_config(), ContextExclusions(options.exclude, self.root))
        self.imported = ImportedFiles(self.root, self.provider.exclusions)
        self.canonical = canonical

    def touch(self, uri: str) -> None:
        self._tick += 1
        self._used[uri] = self._tick

    def forget(self, uri: str) -> None:
        self._used.pop(uri, None)

    def select(self, uri: str, document: Document, prefix: str, documents: Documents) -> RepoContext | None:
        """The context for a completion at the end of `prefix` in `document` (None: none)."""
        if not self.enabled:
            return None
        self.touch(uri)
        try:
            recent = sorted((u for u in self._used if u != uri), key=self._used.__getitem__, reverse=True)
            others = []
            for other in recent[:self.provider.config.max_candidates]:
                doc = documents.find(other)
                if doc is not None:
                    others.append(OpenFile(uri_path(other), doc.text, self.canonical(doc.language_id or None),
                                           self._used[other]))
            current = OpenFile(uri_path(uri), document.text, self.canonical(document.language_id or None))
            held = {f.path for f in others} | {current.path}
            for path, text in self.imported.find(current.path, current.text, current.language):
                if path not in held:  # imported, not open: as recent as the current file
                    others.append(OpenFile(path, text, current.language, self._used[uri]))
            context = self.provider.select(current, prefix, others)
        except Exception as exc:  # noqa: BLE001 — context is optional: complete without it
            log.warning("context from open files failed (%s); completing without it", type(exc).__name__)
            return None
        if not context.snippets:
            return None
        # JSON may carry lone surrogates that no tokenizer takes (documents.py): only in the snippets
        return replace(context, path=well_formed(context.path),
                       snippets=tuple(replace(x, path=well_formed(x.path), text=well_formed(x.text))
                                      for x in context.snippets))
