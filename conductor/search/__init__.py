"""Hybrid search over everything a user's memory holds: by words (BM25) and by meaning
(dense vectors), fused by the mean of their z-scored scores, in Qdrant's engine.

Public face:

* `load_sources` (sources): what is indexed, from ``sources.json`` or the defaults;
* `split_markdown` (chunks): a file into chunks by headings, each with its heading trail;
* `default_embedder` (embedders): the offline all-MiniLM-L6-v2, or None;
* `SearchIndex` (index): one user's chunks in an embedded Qdrant shard; sync and query.
"""
