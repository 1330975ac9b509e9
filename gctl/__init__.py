"""gctl: operations toolkit for bare-metal GPU clusters, scheduling the Gandiva way."""

__version__ = "0.1.0"
