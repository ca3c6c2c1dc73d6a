"""Tandem's memory over MCP, for agents that run on any model: the memory tools
(`tools.py`, named and described in `catalog.py`) over the server's own services or the
memory folder (`access.py`), at `/mcp` on `tandem serve` (`http.py`) and over stdio as
`tandem mcp` (`stdio.py`, which forwards to a running server found by `discovery.py`)."""
