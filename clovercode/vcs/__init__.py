"""Version control: git checkpoints, branches, commits; GitHub pull requests."""
