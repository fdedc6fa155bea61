"""The parallel layout (layout.py: TP x PP x EP ranks, pipeline stages, validate_layout) and the TP
collectives the model's layers call (tp_ops.py). See docs/distributed.md.

Below the model: the layers and the model import it, and so does refengine/distributed (process
groups, launch, workers), which is above the model."""
