"""Benchmarks behind `clovercode bench …`: each prints ratios measured side by side in one run."""
