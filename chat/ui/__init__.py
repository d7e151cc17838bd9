"""The Textual user interface. It talks to the engine and the store only
through their interfaces, never to llama.cpp directly."""
