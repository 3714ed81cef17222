"""`msoverflow mcp`: msoverflow's commands as Model Context Protocol tools for coding agents.

- confine.py: every path an agent names, resolved and held to the server's --root directories.
- catalog.py: the tools (name, description for an agent, input and output schemas generated from the CLI's
  parsers and the package's JSON schemas, so the two cannot drift).
- tools.py: what each tool does, over msoverflow.api and the commands' library code (no analysis of its own),
  compact and paged for a model's context.
- worker.py: one tool call in a child process with a time limit and a memory limit.
- server.py: the stdio server on the official `mcp` SDK (the `agent` extra); the only module that imports it.
- SKILL.md: the workflow for a coding agent, shipped as package data.
"""
