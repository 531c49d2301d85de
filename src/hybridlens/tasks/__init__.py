"""Prompt generators: dictionary retrieval with language and persona style channels."""
