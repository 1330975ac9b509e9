"""The only code that touches machines: SSH, Docker, GPU probe."""
