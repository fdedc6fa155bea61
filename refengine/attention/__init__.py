"""Paged attention's contract and its plain-PyTorch reference.

`metadata.py` turns a step's sequences into the index tensors every layer reuses (the batch
contract); `reference.py` is the PyTorch KV store and paged attention: the CPU path, and the
oracle the Triton kernels in refengine/kernels are tested against. The `Attention` layer
(model/layers/attention.py) picks one of the two per step.

Nothing here imports the model or the Triton kernels, so both may import it.
"""
