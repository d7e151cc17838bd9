"""`python -m chat.bench`: does kvchat keep llama.cpp's speed?

One run, one model, the same prompts, side by side. Prints a table and writes
JSON. Each row has its target; `--quick` (for CI) uses tiny sizes and checks
only that every row was measured.
"""
