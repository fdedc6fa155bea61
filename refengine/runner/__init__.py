"""The model side: input preparation, the forward pass and sampling."""
