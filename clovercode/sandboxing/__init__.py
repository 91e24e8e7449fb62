"""The command sandbox: policy data → bubblewrap arguments (pure), host survey, host self-test."""
