"""Test-only stand-in for ``sgl_kernel`` so SGLang's CPU engine can import on a no-GPU box.

PyPI's ``sglang-kernel`` is CUDA-only (it fails with ``libcuda.so.1: cannot open shared
object file``) and has no sdist to build the CPU variant from. SGLang's CPU engine imports
it but, for a small Llama on the torch-native paths, calls none of its kernels. Every
attribute here is a function that raises, so a kernel that *is* called fails loudly
instead of computing something wrong. Put this folder on PYTHONPATH of the server only.
"""

from __future__ import annotations

from typing import Any, NoReturn

__all__: list[str] = []
__version__ = "0.0.0+diag.test.stub"


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)

    def missing(*args: object, **kwargs: object) -> NoReturn:
        raise NotImplementedError(f"sgl_kernel test stub: {name}() was called")

    missing.__name__ = name
    return missing
