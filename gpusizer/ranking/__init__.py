"""Ranking: the rules file and the search that ranks GPUs for a workload."""
