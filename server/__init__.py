"""Umbra cloud service: runs the middle blocks for many clients over the wire protocol.

`create_app()` (server.app) is the FastAPI app; `server.serve.run` serves it under uvicorn;
`server.launch` starts it as a subprocess on loopback for `umbra/connect.py` (the CLIs and
servers with no cloud configured), benchmarks and tests."""
