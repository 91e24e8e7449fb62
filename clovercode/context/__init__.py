"""Repository context: repo map (tree-sitter tags, ranking, rendering), instruction files, prompt budget, compaction."""
