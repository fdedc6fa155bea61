"""Reports render what the analyzers computed: the self-contained HTML report, Markdown, CSV and JSON
files, terminal tables, the figures, and the same for A/B comparisons (docs/reports.md)."""
