"""The engine core: KV block accounting and scheduling, pure Python over integers."""
