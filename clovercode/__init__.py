"""clovercode: an agentic coding assistant for the terminal."""

__version__ = "0.1.0"
