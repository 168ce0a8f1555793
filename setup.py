"""setuptools needs setup.py for the cffi extension; everything else is in pyproject.toml."""

from setuptools import setup

setup(cffi_modules=["walfs/_build.py:ffibuilder"])
