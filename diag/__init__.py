"""diag: forensics for LLM inference servers (SGLang, vLLM)."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
