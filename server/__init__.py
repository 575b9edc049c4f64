"""Umbra cloud service: runs the middle blocks for many clients over the wire protocol.

`create_app()` (server.app) is the FastAPI app; `server.serve.run` serves it under uvicorn;
`server.launch.local_cloud` starts it as a subprocess for the CLI and tests."""
