"""The model behind a small interface. Nothing in this package imports Textual."""

from chat.engine.protocol import Engine, EngineEvent, Finished, ModelInfo, TokenEvent

__all__ = ["Engine", "EngineEvent", "Finished", "ModelInfo", "TokenEvent"]
