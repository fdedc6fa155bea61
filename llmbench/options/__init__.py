"""Options and values as every command spells them: lists, durations, the target and the workload."""
