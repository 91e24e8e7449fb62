"""The trust boundary: one answer to "may this input do this?".

Ground floor: imported by config loading, the REPL, ``fix``, ``exec``, ``serve``, hooks and MCP;
imports nothing above :mod:`clovercode.errors` and the settings table. One module per question:

- ``project``: is this project trusted, and which settings may its ``clovercode.toml`` set.
- ``models``: which models may run their own (remote) code.
- ``paths``: does a path clovercode reads for the model resolve inside the project.
- ``text``: untrusted text made inert for a terminal.
- ``markdown``: untrusted text made inert for a pull-request body or a commit message.
- ``gitsafe``: git invoked so that repository config cannot run programs.

docs/security.md ("Trust") states the model and its threat table.
"""
