"""Model building blocks: TP-ready linears and embeddings, RoPE, RMSNorm, SwiGLU, paged attention."""
