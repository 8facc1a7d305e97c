"""Floor 0, the operating system: Linux-only calls in one place, and outputs written whole."""
