"""campflow: executable agent environments and a continuous-improvement pipeline for LLM agents."""

__version__ = "0.1.0"
