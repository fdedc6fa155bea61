"""playbooks package."""
