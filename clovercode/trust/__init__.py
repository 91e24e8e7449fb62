"""The trust boundary: one answer to "may this input do this?".

Ground floor: imported by config loading, the REPL, ``fix``, ``exec``, ``serve``, hooks and MCP;
imports nothing above :mod:`clovercode.ground.errors` and the settings table. One module per question:

- ``project``: is this project trusted, and which settings may its ``clovercode.toml`` set.
- ``models``: which models may run their own (remote) code.
- ``projectview``: the one way to the project's files on the host: every open, listing, walk,
  write and delete resolved beneath the root (no step through a link that leaves it).
- ``paths``: does a path resolve inside the project (the view's yes or no); which files run
  outside the sandbox later (CI definitions, the tree's git hooks, other tools' configuration).
- ``gitsafe``: git invoked so that repository config cannot run programs.
- ``terminal``: untrusted text made inert for a terminal.
- ``markdown``: untrusted text made inert for a commit message or a pull-request body.
- ``serve``: who may use ``clovercode serve``, and what one of its clients may learn about another.

docs/security.md ("Trust") states the model and its threat table.
"""
