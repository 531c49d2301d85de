"""Prompt generators (dictionary retrieval with language and persona style channels), prompt sets and batching."""
