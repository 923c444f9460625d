"""``MemoryStore`` by aggregate; the class itself is in ``store/memory.py``."""
