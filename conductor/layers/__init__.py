"""The memory layers of one user's continuous conversation, as files a person can open.

Public face:

* `LayerFiles` (paths): where each layer lives under ``memory/layers/<user>/``;
* `core` and `working`: the layers in every prompt (core written by the operator only,
  working memory by the consolidation job);
* `semantic`: facts, preferences and projects, read on demand;
* `HistoryStore` (history): one versioned JSON file a turn, never deleted;
* `ConversationState` (state): the consolidation checkpoint and the replay window;
* `assemble_conversation` (conversation): the continuous conversation's messages, most
  stable first, for the server to render.
"""
