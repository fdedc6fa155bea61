"""Analyzers read run directories and compute statistics, verdicts and findings."""
