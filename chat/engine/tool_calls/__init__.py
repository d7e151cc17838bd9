"""Tool calls of a local model: which syntax its chat template teaches it
(`syntax`), calls found in its streamed output (`parser`), and the grammar
its arguments are sampled under once a call has begun (`grammar`).

No Textual here. What the code relies on is in docs/tools.md ("How a local
model calls a tool").
"""
