"""kvchat: a terminal chat client for local GGUF models."""

__version__ = "0.1.0"
