"""Field types that the local HTTP API's request bodies share (Umbra's own POST /v1/infill and
the OpenAI-compatible POST /v1/completions): document text, warm-session ids, language ids."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

MAX_TEXT_CHARS = 1_000_000  # per prefix / suffix / prompt; the prompt keeps only `contextTokens` of it anyway
SESSION_PATTERN = r"^[A-Za-z0-9._:-]+$"
LANGUAGE_PATTERN = r"^[A-Za-z0-9._+#-]+$"  # editor ids and aliases: python, golang, c++, c#, objective-c

# The document's text before or after the cursor.
DocumentText = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
# A warm session kept for prefix reuse (choose unguessable ids); absent = a throw-away session.
SessionId = Annotated[str, Field(min_length=1, max_length=128, pattern=SESSION_PATTERN)]
# The document's language (routing of per-language experts), e.g. "python" or "golang".
LanguageId = Annotated[str, Field(min_length=1, max_length=64, pattern=LANGUAGE_PATTERN)]
