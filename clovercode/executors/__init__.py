"""Command executors: the seam between tools and the operating system (see base.Executor)."""
