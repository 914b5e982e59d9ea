"""draftline: a reproducible pipeline that trains DFlash drafters for a target LLM."""

__version__ = "0.1.0"
