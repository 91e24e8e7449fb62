"""The parts of `clovercode fix`: the issue, the test loop, the report (fixcmd.py joins them)."""
