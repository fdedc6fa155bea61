"""The capacity answer: the highest load within the SLO, from a search's re-measured levels."""
