"""Program mode and the sandbox that runs model-written programs (the security boundary)."""
