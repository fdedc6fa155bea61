"""`llmbench quality`: a quantized model against the unquantized one."""
