"""`llmdiag plan`: TP / PP / EP plans ranked for a model on a cluster."""
