"""Umbra's client servers: the language server (`umbra lsp`) and the local completion HTTP
server (`umbra serve`), both over the split completion engine — never anything else.

    options.py    the one options schema (InitializationOptions): editor initializationOptions,
                  UMBRA_LOCAL_* settings and per-request overrides, converted once
    errors.py     OptionsError, NotReady, Superseded; the one error → LSP code / HTTP status table
    cloud.py      the cloud to complete through, from the options: self-started on loopback or
                  configured (token from the OS keyring or the environment); umbra/connect.py's
                  CloudLink does the rest (restart, /healthz probe, audit tap)
    backend.py    Backend: completions over the cloud supervisor, sessions and the type-ahead,
                  shared by both servers (counted by outcome and stop reason)
    cloud_supervisor.py   the model, the cloud and the engine: set-up, unreachable and back,
                  restarts of a self-started cloud
    status.py     Status (state, privacy mode, expert, access) and the board that sends changes
    arrivals.py   the editor's completion requests as read: document snapshot, arrival time
                  (the deadline counts from it), and whether a newer one has already arrived
    sessions.py   SessionPool: one warm session per document / session id, LRU; a newer request
                  cancels the older ones and runs alone (counted: decodes running, started, most at once)
    typeahead.py  TypeAhead: typing the first characters of the completion just shown is answered
                  with its rest, without a decode (per document, LRU-bounded)
    documents.py  open documents with LSP line breaks and position encodings
    server.py     the pygls language server: its features, `umbra/status` notifications, `umbra/stats`
    stdio.py      run_stdio: the server on stdin/stdout for the life of the process (`umbra lsp`)
    settings.py   LocalSettings of the HTTP server: the schema from UMBRA_LOCAL_*, plus its own
    http_app.py   the FastAPI app: lifespan, error handlers, `run` under uvicorn
    api_auth.py   who may call the HTTP API: a per-start bearer token in a user-only file, and
                  loopback Host names only (DNS rebinding)
    routes/       /v1/completions and /v1/models (OpenAI's API), /v1/infill (Umbra's own),
                  /v1/sessions/{id}, /healthz
    openai_schemas.py, openai_errors.py, event_stream.py   the OpenAI API's bodies, its error
                  object, and server-sent events that stop their producer when the client goes
    fields.py, disconnect.py   request field types; completions cancelled when the client goes
See docs/ARCHITECTURE.md ("Language server and local HTTP server")."""
