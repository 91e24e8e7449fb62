"""``clovercode eval``: run coding tasks through the agent loop and measure what matters for agents.

tasks (suites and their formats) → workspace (a fresh git repository per attempt, hidden tests) →
runner (the loop ``fix`` uses, timed and recorded) → metrics (pure functions of the trajectories) →
results (JSON) → report (tables, comparison).
"""
