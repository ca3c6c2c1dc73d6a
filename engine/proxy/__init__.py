"""Proxy mode's engines: `EngineBackend`s over another server's HTTP API."""
