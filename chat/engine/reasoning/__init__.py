"""Reasoning models: which thinking markers a model uses (`markers`), a reply
split into its thinking and its answer as it streams (`splitter`), and the
thinking that servers send in a field of its own (`server_fields`).
See docs/reasoning.md."""
